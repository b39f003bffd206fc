//! The training process's socket: owner-only (a 0600 socket in a 0700 folder), peers of
//! another user refused, no network listener. Each viewer gets a reader and a writer thread,
//! both ending when it disconnects.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crossbeam_channel::{never, select, unbounded, Sender};
use serde::{Deserialize, Serialize};

use super::hub::{Hub, HubMsg};
use super::protocol::{decode, encode, version_error, ClientMsg, ServerMsg, VERSION};
use crate::engine::Control;

/// Written to `server.json` in the run directory: how to reach a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub pid: u32,
    pub socket: PathBuf,
    pub version: u32,
}

/// The file in a run directory that names its server.
pub const SERVER_FILE: &str = "server.json";
/// Messages a viewer may fall behind by before it is dropped.
const VIEWER_BUFFER: usize = 4096;

/// This process's effective user id.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user id of the process at the other end of `stream` (SO_PEERCRED).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the buffer and its length describe a valid ucred for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cred.uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The per-user folder for sockets: `$XDG_RUNTIME_DIR/dpt-tui`, else `/tmp/dpt-tui-<uid>`,
/// created 0700 and refused if someone else owns it or others may enter it. Short, because a
/// socket path may not exceed about 100 bytes.
pub fn socket_dir() -> std::io::Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_dir()) {
        Some(d) => d.join("dpt-tui"),
        None => PathBuf::from(format!("/tmp/dpt-tui-{}", my_uid())),
    };
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let meta = std::fs::metadata(&dir)?;
    if meta.uid() != my_uid() || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private folder of this user (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(dir)
}

fn socket_name(run_dir: &Path) -> String {
    let canonical = run_dir.canonicalize().unwrap_or_else(|_| run_dir.to_owned());
    // FNV-1a: a short, stable name for the run directory.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}.sock")
}

/// Starts listening for viewers of the run in `run_dir`: controls go to `controls`, history and
/// live data come from `hub`. A stale socket left by a crashed process is removed first.
pub fn serve(run_dir: &Path, hub: Hub, controls: Sender<Control>) -> std::io::Result<PathBuf> {
    let path = socket_dir()?.join(socket_name(run_dir));
    if path.exists() {
        if UnixStream::connect(&path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is being served already", run_dir.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let info = ServerInfo { pid: std::process::id(), socket: path.clone(), version: VERSION };
    let json = serde_json::to_string_pretty(&info).expect("server info serializes");
    let tmp = run_dir.join(".server.json.tmp");
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, run_dir.join(SERVER_FILE))?;
    std::thread::Builder::new().name("dpt-server".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (hub, controls) = (hub.clone(), controls.clone());
            // A viewer that cannot get a thread is simply not served.
            let _ = std::thread::Builder::new()
                .name("dpt-viewer".into())
                .spawn(move || viewer(stream, hub, controls));
        }
    })?;
    Ok(path)
}

fn send_line(stream: &mut UnixStream, msg: &ServerMsg) -> std::io::Result<()> {
    let mut line = encode(msg);
    line.push('\n');
    stream.write_all(line.as_bytes())
}

/// Serves one viewer: the handshake, then its commands on this thread and the stream of run
/// data on a writer thread.
fn viewer(mut stream: UnixStream, hub: Hub, controls: Sender<Control>) {
    if peer_uid(&stream).ok() != Some(my_uid()) {
        let _ = send_line(
            &mut stream,
            &ServerMsg::Error { message: "permission denied: the run belongs to another user".into() },
        );
        return;
    }
    let Ok(read_half) = stream.try_clone() else { return };
    let mut lines = BufReader::new(read_half).lines();
    // A peer that never says hello does not hold a thread forever.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let read_only =
        match lines.next().map(|l| l.map_err(|e| e.to_string()).and_then(|l| decode::<ClientMsg>(&l))) {
            Some(Ok(ClientMsg::Hello { version, read_only })) => {
                if let Some(message) = version_error(version) {
                    let _ = send_line(&mut stream, &ServerMsg::Error { message });
                    return;
                }
                read_only
            }
            Some(Ok(_)) => {
                let _ = send_line(&mut stream, &ServerMsg::Error { message: "say hello first".into() });
                return;
            }
            Some(Err(message)) => {
                let _ = send_line(&mut stream, &ServerMsg::Error { message });
                return;
            }
            None => return,
        };
    let _ = stream.set_read_timeout(None);
    let Some((snapshot, updates)) = hub.subscribe(VIEWER_BUFFER) else {
        let _ = send_line(&mut stream, &ServerMsg::Error { message: "the run has ended".into() });
        return;
    };
    if send_line(&mut stream, &ServerMsg::Welcome { version: VERSION, snapshot: Box::new(snapshot) }).is_err()
    {
        return;
    }
    let (replies, reply_rx) = unbounded::<ServerMsg>();
    let Ok(mut out) = stream.try_clone() else { return };
    let writer = std::thread::Builder::new().name("dpt-viewer-out".into()).spawn(move || {
        let mut updates = updates;
        loop {
            let msg = select! {
                recv(updates) -> m => match m {
                    Ok(HubMsg::Event(event)) => ServerMsg::Event { event },
                    Ok(HubMsg::Monitor(msg)) => ServerMsg::Monitor { msg },
                    Err(_) => {
                        // The run ended (or this viewer fell behind): say no more.
                        updates = never();
                        if reply_rx.is_empty() {
                            break;
                        }
                        continue;
                    }
                },
                recv(reply_rx) -> m => match m {
                    Ok(m) => m,
                    // The viewer's reader ended: it has gone.
                    Err(_) => break,
                },
            };
            if send_line(&mut out, &msg).is_err() {
                break;
            }
        }
        let _ = out.shutdown(std::net::Shutdown::Both);
    });
    for line in lines {
        let Ok(line) = line else { break };
        let reply = match decode::<ClientMsg>(&line) {
            Ok(ClientMsg::Control { id, control }) => {
                if read_only {
                    ServerMsg::Reply { id, ok: false, error: Some("this viewer attached read-only".into()) }
                } else if controls.send(control).is_ok() {
                    ServerMsg::Reply { id, ok: true, error: None }
                } else {
                    ServerMsg::Reply { id, ok: false, error: Some("the run has ended".into()) }
                }
            }
            Ok(ClientMsg::Hello { .. }) => ServerMsg::Error { message: "hello twice".into() },
            // A bad line is answered and ignored; the viewer and the run go on.
            Err(message) => ServerMsg::Error { message },
        };
        if replies.send(reply).is_err() {
            break;
        }
    }
    drop(replies);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(w) = writer {
        let _ = w.join();
    }
}
