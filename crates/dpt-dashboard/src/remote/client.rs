//! Attaching to a running job: connect to its socket, say hello, take the snapshot, then
//! receive its events and device samples and send controls.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crossbeam_channel::{unbounded, Receiver, Sender};
use thiserror::Error;

use super::protocol::{decode, encode, ClientMsg, ServerMsg, Snapshot, VERSION};
use super::registry::ServerInfo;
use super::server::SERVER_FILE;
use crate::monitor::MonitorMsg;
use crate::record::{Change, Record};
use crate::Control;

/// Why attaching failed.
#[derive(Debug, Error)]
pub enum AttachError {
    #[error("{0} has no running job to attach to (no {SERVER_FILE}); see 'dpt-tui ls'")]
    NotServed(PathBuf),
    #[error("the job of {run} is not running any more (its socket {socket} does not answer); see 'dpt-tui ls', and resume it with 'dpt-tui --resume {run}'")]
    Dead { run: PathBuf, socket: PathBuf },
    #[error("the job refused the connection: {0}")]
    Refused(String),
    #[error("the connection to the job failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A connection to a running job.
pub struct Attached {
    pub snapshot: Snapshot,
    pub records: Receiver<Record>,
    pub monitor: Receiver<MonitorMsg>,
    pub controls: Sender<Control>,
}

/// Reads `run_dir/server.json`.
pub fn server_info(run_dir: &Path) -> Option<ServerInfo> {
    let text = std::fs::read_to_string(run_dir.join(SERVER_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether the job of `run_dir` answers on its socket.
pub fn is_live(run_dir: &Path) -> bool {
    server_info(run_dir).is_some_and(|i| i.answers())
}

/// Connects to the job of `run_dir`, with or without the right to steer it.
pub fn attach(run_dir: &Path, read_only: bool) -> Result<Attached, AttachError> {
    let info = server_info(run_dir).ok_or_else(|| AttachError::NotServed(run_dir.to_owned()))?;
    let stream = UnixStream::connect(&info.socket)
        .map_err(|_| AttachError::Dead { run: run_dir.to_owned(), socket: info.socket.clone() })?;
    attach_stream(stream, read_only, VERSION)
}

/// The handshake and the two threads of a connection, over `stream`.
pub fn attach_stream(mut stream: UnixStream, read_only: bool, version: u32) -> Result<Attached, AttachError> {
    let mut hello = encode(&ClientMsg::Hello { version, read_only });
    hello.push('\n');
    stream.write_all(hello.as_bytes())?;
    let mut lines = BufReader::new(stream.try_clone()?).lines();
    let first =
        lines.next().ok_or_else(|| AttachError::Refused("the job closed the connection".into()))??;
    let snapshot = match decode::<ServerMsg>(&first).map_err(AttachError::Refused)? {
        ServerMsg::Welcome { snapshot, .. } => *snapshot,
        ServerMsg::Error { message } => return Err(AttachError::Refused(message)),
        other => return Err(AttachError::Refused(format!("unexpected first message {other:?}"))),
    };
    let (event_tx, events) = unbounded();
    let (monitor_tx, monitor) = unbounded();
    std::thread::Builder::new().name("dpt-attach-in".into()).spawn(move || {
        for line in lines {
            let Ok(line) = line else { break };
            let sent = match decode::<ServerMsg>(&line) {
                Ok(ServerMsg::Record { record }) => event_tx.send(record).is_ok(),
                Ok(ServerMsg::Monitor { msg }) => monitor_tx.send(msg).is_ok(),
                Ok(ServerMsg::Reply { ok: false, error, .. }) => event_tx
                    .send(Record::Event(Change::Refused {
                        reason: error.unwrap_or_else(|| "refused".into()),
                    }))
                    .is_ok(),
                Ok(ServerMsg::Error { message }) => {
                    event_tx.send(Record::Event(Change::Warning { message })).is_ok()
                }
                Ok(_) | Err(_) => true,
            };
            if !sent {
                break;
            }
        }
    })?;
    let (controls, control_rx) = unbounded::<Control>();
    let mut out = stream;
    std::thread::Builder::new().name("dpt-attach-out".into()).spawn(move || {
        for (id, control) in control_rx.iter().enumerate() {
            let mut line = encode(&ClientMsg::Control { id: id as u64, control });
            line.push('\n');
            if out.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
        // The viewer is leaving: close both directions so the reader thread ends too.
        let _ = out.shutdown(std::net::Shutdown::Both);
    })?;
    Ok(Attached { snapshot, records: events, monitor, controls })
}
