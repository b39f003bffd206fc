//! The training process's socket: owner-only (a 0600 socket in a 0700 folder), peers of
//! another user refused, no network listener. Each viewer gets a reader and a writer thread,
//! both ending when it disconnects; a viewer that leaves with its rewind dialog open lets go
//! of the run. A job that ends waits (a few seconds at most) until each viewer has been sent all
//! the run said, its summary last, before the process exits.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::hub::{Hub, HubMsg};
use super::protocol::{decode, encode, version_error, ClientMsg, ServerMsg, VERSION};
use super::registry::{self, my_uid, ServerInfo};
use crate::atomic;
use crate::Control;
use crossbeam_channel::{never, select, unbounded, Sender};

/// The file in a run directory that names its server.
pub const SERVER_FILE: &str = "server.json";
/// Messages a viewer may fall behind by before it is dropped.
const VIEWER_BUFFER: usize = 4096;
/// How long a job that ends waits for its viewers to be sent the rest of the run; one that
/// reads nothing (a frozen terminal) holds the exit no longer.
const DRAIN: Duration = Duration::from_secs(5);

/// The user id of the process at the other end of `stream` (SO_PEERCRED).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

/// A job being served: where, and how to stop announcing it.
pub struct Served {
    pub info: ServerInfo,
    viewers: Viewers,
}

impl Served {
    /// Removes the socket, the registry entry and `server.json` (the job is ending), then waits
    /// (at most [`DRAIN`]) until every viewer has been sent what the hub gave it and has gone:
    /// called once the hub has stopped, a viewer gets the run's last records (its summary)
    /// before the process exits and ends its threads.
    pub fn withdraw(&self) {
        let _ = std::fs::remove_file(&self.info.socket);
        let _ = std::fs::remove_file(self.info.entry_path());
        let _ = std::fs::remove_file(self.info.run_dir.join(SERVER_FILE));
        self.viewers.wait_gone(DRAIN);
    }
}

/// The viewers being served, counted from the connection until their threads end.
#[derive(Clone, Default)]
struct Viewers(Arc<(Mutex<usize>, Condvar)>);

/// One viewer's place in [`Viewers`], given up when dropped.
struct Serving(Viewers);

impl Drop for Serving {
    fn drop(&mut self) {
        let (count, gone) = &*(self.0).0;
        *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        gone.notify_all();
    }
}

impl Viewers {
    fn enter(&self) -> Serving {
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Serving(self.clone())
    }

    /// Waits until no viewer is served, at most `timeout`; whether none is.
    fn wait_gone(&self, timeout: Duration) -> bool {
        let (count, gone) = &*self.0;
        let deadline = Instant::now() + timeout;
        let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = gone.wait_timeout(n, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    /// Serves each viewer that connects to `listener` on threads of its own.
    fn accept(&self, listener: UnixListener, hub: Hub, controls: Sender<Control>) -> std::io::Result<()> {
        let viewers = self.clone();
        std::thread::Builder::new().name("dpt-server".into()).spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (hub, controls, serving) = (hub.clone(), controls.clone(), viewers.enter());
                // A viewer that cannot get a thread is simply not served.
                let _ = std::thread::Builder::new().name("dpt-viewer".into()).spawn(move || {
                    viewer(stream, hub, controls);
                    drop(serving);
                });
            }
        })?;
        Ok(())
    }
}

/// Starts listening for viewers of the run in `run_dir` (absolute): controls go to `controls`,
/// history and live data come from `hub`. What dead jobs left in the registry is removed
/// first.
pub fn serve(run_dir: &Path, hub: Hub, controls: Sender<Control>) -> std::io::Result<Served> {
    let _ = registry::prune();
    let path = registry::socket_dir()?.join(registry::socket_name(run_dir));
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
    let info = ServerInfo {
        pid: std::process::id(),
        socket: path.clone(),
        version: VERSION,
        run_dir: run_dir.to_owned(),
        started_unix: crate::unix_now(),
    };
    let json = serde_json::to_string_pretty(&info).expect("server info serializes");
    atomic::write_bytes(&run_dir.join(SERVER_FILE), json.as_bytes())?;
    atomic::write_bytes(&info.entry_path(), json.as_bytes())?;
    let viewers = Viewers::default();
    viewers.accept(listener, hub, controls)?;
    Ok(Served { info, viewers })
}

/// The hold one viewer's rewind dialog has on the run, kept by the thread that reads the
/// viewer: the engine counts holds, so each viewer passes on a change only, and lets go when it
/// leaves however it leaves (closed, detached, killed, its terminal gone).
#[derive(Debug, Default)]
struct ViewerHold {
    on: bool,
}

impl ViewerHold {
    /// What to send the engine for `control` from this viewer: nothing for a hold it has already
    /// (or a let-go of none).
    fn pass(&mut self, control: Control) -> Option<Control> {
        match control {
            Control::Hold { on } if on == self.on => None,
            Control::Hold { on } => {
                self.on = on;
                Some(control)
            }
            other => Some(other),
        }
    }

    /// What the viewer's leaving sends the engine.
    fn leave(self) -> Option<Control> {
        self.on.then_some(Control::Hold { on: false })
    }
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
                    Ok(HubMsg::Record(record)) => ServerMsg::Record { record },
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
    let mut hold = ViewerHold::default();
    for line in lines {
        let Ok(line) = line else { break };
        let reply = match decode::<ClientMsg>(&line) {
            Ok(ClientMsg::Control { id, control }) => {
                if read_only {
                    ServerMsg::Reply { id, ok: false, error: Some("this viewer attached read-only".into()) }
                } else if hold.pass(control).is_none_or(|c| controls.send(c).is_ok()) {
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
    if let Some(control) = hold.leave() {
        // The run may have ended already: then nobody waits on the hold.
        let _ = controls.send(control);
    }
    drop(replies);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(w) = writer {
        let _ = w.join();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::monitor::MonitorMsg;
    use crate::record::history::History;
    use crate::record::{Change, Record};

    const ON: Control = Control::Hold { on: true };
    const OFF: Control = Control::Hold { on: false };

    #[test]
    fn a_viewer_passes_on_changes_of_its_hold_only_and_lets_go_when_it_leaves() {
        let mut hold = ViewerHold::default();
        assert_eq!(hold.pass(OFF), None, "a let-go of no hold would take another viewer's");
        assert_eq!(hold.pass(ON), Some(ON));
        assert_eq!(hold.pass(ON), None, "held once, however often asked");
        assert_eq!(hold.pass(Control::Pause), Some(Control::Pause));
        assert_eq!(hold.leave(), Some(OFF), "leaving with the dialog open");
        let mut closed = ViewerHold::default();
        assert_eq!(closed.pass(ON), Some(ON));
        assert_eq!(closed.pass(OFF), Some(OFF));
        assert_eq!(closed.leave(), None);
    }

    #[test]
    fn a_job_that_ends_waits_until_its_viewer_was_sent_the_whole_run() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let listener = UnixListener::bind(dir.path().join("job.sock")).expect("a socket");
        let (records, from_engine) = unbounded();
        let (_readings, from_monitor) = unbounded::<MonitorMsg>();
        let (hub, _, hub_thread) =
            Hub::spawn(History::default(), from_engine, from_monitor, &[]).expect("a hub");
        let (controls, _asked) = unbounded();
        let viewers = Viewers::default();
        viewers.accept(listener, hub, controls).expect("serving");

        let mut stream = UnixStream::connect(dir.path().join("job.sock")).expect("connected");
        send_line_client(&mut stream, &ClientMsg::Hello { version: VERSION, read_only: true });
        let mut lines = BufReader::new(stream.try_clone().expect("a second handle"));
        let mut welcome = String::new();
        lines.read_line(&mut welcome).expect("the welcome");
        assert!(
            matches!(decode::<ServerMsg>(welcome.trim_end()), Ok(ServerMsg::Welcome { .. })),
            "{welcome}"
        );

        // The run's last records, then its end: the hub stops, the job withdraws and exits. Few
        // enough that the socket holds them all unread (each line costs the sender a buffer).
        const N: usize = 50;
        for step in 0..N {
            records.send(Record::Event(Change::Paused { global_step: step })).expect("the hub listens");
        }
        drop(records);
        hub_thread.join().expect("the hub ends");
        assert!(viewers.wait_gone(Duration::from_secs(30)), "the viewer's threads ended");

        // All of it is in the socket already, and the job closed it: nothing is left to wait for.
        stream.set_nonblocking(true).expect("non-blocking");
        let mut rest = String::new();
        lines.read_to_string(&mut rest).expect("the whole run and the end of the stream, without waiting");
        let steps: Vec<usize> = rest
            .lines()
            .map(|l| match decode::<ServerMsg>(l) {
                Ok(ServerMsg::Record { record: Record::Event(Change::Paused { global_step }) }) => {
                    global_step
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(steps, (0..N).collect::<Vec<_>>());
    }

    fn send_line_client(stream: &mut UnixStream, msg: &ClientMsg) {
        let mut line = encode(msg);
        line.push('\n');
        stream.write_all(line.as_bytes()).expect("sent");
    }
}
