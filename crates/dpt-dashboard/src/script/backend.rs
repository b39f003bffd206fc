//! The backend of a script run: the endpoint the ranks connect to (an owner-only Unix socket,
//! peers of another user refused) and the one thread that answers them in turn, applies the
//! viewers' controls through [`Steering`] and hands the records [`Reports`] makes to the
//! recorder. It ends when the script does.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{never, select, unbounded, Receiver, Sender};

use super::reports::Reports;
use super::steering::Steering;
use super::wire::{self, Answer, Request, Status};
use crate::record::script::ScriptDevice;
use crate::record::{Change, Record};
use crate::remote::registry::my_uid;
use crate::remote::server::peer_uid;
use crate::Control;

/// What reaches the backend thread besides the viewers' controls.
#[derive(Debug)]
pub enum Event {
    Connected {
        conn: u64,
        stream: UnixStream,
    },
    Line {
        conn: u64,
        text: String,
    },
    Closed {
        conn: u64,
    },
    /// The script ended (`status` in words: `exit status 1`, `killed by SIGKILL`).
    Exited {
        status: String,
        ok: bool,
    },
}

/// How the run went, as the backend saw it.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// A rank said hello and stepped: the run has a record.
    pub started: bool,
    /// Some rank said hello.
    pub greeted: bool,
}

/// A running backend.
pub struct Backend {
    pub endpoint: PathBuf,
    /// Where the script's end is reported ([`Event::Exited`]).
    pub events: Sender<Event>,
    pub thread: JoinHandle<Outcome>,
}

/// What the backend is given.
pub struct Setup {
    pub endpoint: PathBuf,
    pub run_dir: PathBuf,
    pub command: Vec<String>,
    pub records: Sender<Record>,
    pub controls: Receiver<Control>,
    /// The backend serves a process that started it itself (`dpt_tui.init` without `dpt-tui
    /// run`): the run ends when the last rank's connection closes.
    pub ends_with_ranks: bool,
    /// Each rank's devices as it names them, with the rank's process, for the device monitor.
    pub devices: Sender<Vec<(ScriptDevice, u32)>>,
    /// Told once, when the first rank says hello (the dashboard then has a run to show).
    pub greeting: Sender<()>,
}

/// Listens on `setup.endpoint` and starts the backend thread.
pub fn spawn(setup: Setup) -> std::io::Result<Backend> {
    if setup.endpoint.exists() {
        if UnixStream::connect(&setup.endpoint).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by another run", setup.endpoint.display()),
            ));
        }
        std::fs::remove_file(&setup.endpoint)?;
    }
    let listener = UnixListener::bind(&setup.endpoint)?;
    std::fs::set_permissions(&setup.endpoint, std::fs::Permissions::from_mode(0o600))?;
    let (events, incoming) = unbounded::<Event>();
    let accept = events.clone();
    std::thread::Builder::new().name("dpt-endpoint".into()).spawn(move || {
        for (conn, stream) in (0u64..).zip(listener.incoming()) {
            let Ok(stream) = stream else { continue };
            if peer_uid(&stream).ok() != Some(my_uid()) {
                continue;
            }
            let Ok(reader) = stream.try_clone() else { continue };
            if accept.send(Event::Connected { conn, stream }).is_err() {
                return;
            }
            let lines = accept.clone();
            let _ = std::thread::Builder::new().name("dpt-rank-in".into()).spawn(move || {
                for line in BufReader::new(reader).lines() {
                    let Ok(text) = line else { break };
                    if lines.send(Event::Line { conn, text }).is_err() {
                        return;
                    }
                }
                let _ = lines.send(Event::Closed { conn });
            });
        }
    })?;
    let endpoint = setup.endpoint.clone();
    let thread = std::thread::Builder::new().name("dpt-script".into()).spawn(move || run(setup, incoming))?;
    Ok(Backend { endpoint, events, thread })
}

/// One rank's connection.
struct Conn {
    stream: UnixStream,
    rank: Option<usize>,
}

/// The backend's state: the connections, the schedule and the record.
struct State {
    conns: HashMap<u64, Conn>,
    steering: Option<Steering>,
    reports: Reports,
    records: Sender<Record>,
    devices: Sender<Vec<(ScriptDevice, u32)>>,
    greeting: Sender<()>,
    all_devices: Vec<(ScriptDevice, u32)>,
    run_dir: String,
    stopped: bool,
    greeted: bool,
}

fn run(setup: Setup, incoming: Receiver<Event>) -> Outcome {
    let mut state = State {
        conns: HashMap::new(),
        steering: None,
        reports: Reports::new(setup.command, Instant::now(), crate::unix_now()),
        records: setup.records,
        devices: setup.devices,
        greeting: setup.greeting,
        all_devices: Vec::new(),
        run_dir: setup.run_dir.display().to_string(),
        stopped: false,
        greeted: false,
    };
    let mut controls = setup.controls;
    loop {
        select! {
            recv(incoming) -> event => match event {
                Ok(Event::Connected { conn, stream }) => {
                    state.conns.insert(conn, Conn { stream, rank: None });
                }
                Ok(Event::Line { conn, text }) => state.request(conn, &text),
                Ok(Event::Closed { conn }) => {
                    if let Some(rank) = state.conns.remove(&conn).and_then(|c| c.rank) {
                        // A rank gone without `finish` holds nobody: the script's exit says more.
                        if let Some(s) = &mut state.steering {
                            s.finish(rank);
                        }
                    }
                    let ranks_left = state.conns.values().any(|c| c.rank.is_some());
                    if setup.ends_with_ranks && state.greeted && !ranks_left {
                        if let Some(r) = state.reports.exited("its process ended", false) {
                            state.record(r);
                        }
                        break;
                    }
                }
                Ok(Event::Exited { status, ok }) => {
                    if let Some(r) = state.reports.exited(&status, ok) {
                        state.record(r);
                    }
                    break;
                }
                Err(_) => break,
            },
            recv(controls) -> control => match control {
                Ok(control) => state.control(control),
                Err(_) => controls = never(),
            },
        }
    }
    let _ = std::fs::remove_file(&setup.endpoint);
    Outcome { started: state.reports.started(), greeted: state.greeted }
}

impl State {
    fn record(&self, record: Record) {
        // The recorder may have gone (it failed to write): the script goes on regardless.
        let _ = self.records.send(record);
    }

    fn control(&mut self, control: Control) {
        let refusal = match &mut self.steering {
            Some(s) => s.ask(control).err(),
            None => Some("the script has not called dpt_tui.init yet".to_owned()),
        };
        if let Some(reason) = refusal {
            self.record(Record::Event(Change::Refused { reason }));
        }
    }

    fn answer(&mut self, conn: u64, answer: &Answer) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.stream.write_all(wire::line(answer).as_bytes()).is_err() {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn request(&mut self, conn: u64, text: &str) {
        let request = match wire::read(text) {
            Ok(r) => r,
            Err(message) => return self.answer(conn, &Answer::Error { message }),
        };
        let rank = self.conns.get(&conn).and_then(|c| c.rank);
        let (rank, request) = match (rank, request) {
            (None, Request::Hello(hello)) => return self.hello(conn, *hello),
            (Some(_), Request::Hello(_)) => {
                return self.answer(conn, &Answer::Error { message: "hello twice".into() })
            }
            (None, _) => return self.answer(conn, &Answer::Error { message: "say hello first".into() }),
            (Some(rank), request) => (rank, request),
        };
        let now = Instant::now();
        let (step, lr) = match &request {
            Request::Step(s) => (s.step, s.lr),
            Request::Poll { step }
            | Request::Eval { step, .. }
            | Request::Saved { step, .. }
            | Request::SaveFailed { step, .. }
            | Request::Finish { step, .. } => (*step, None),
            Request::Hello(_) => unreachable!("answered above"),
        };
        let mut records = Vec::new();
        let mut finished = false;
        match request {
            Request::Step(s) => records = self.reports.step(rank, &s, now),
            Request::Poll { .. } => {}
            Request::Eval { step, metrics } => records.extend(self.reports.eval(rank, step, metrics)),
            Request::Saved { step, path } => records.push(self.reports.saved(step, path)),
            Request::SaveFailed { message, .. } => records.push(self.reports.save_failed(message)),
            Request::Finish { status, message, .. } => {
                self.stopped |= status == Status::Stopped;
                records = self.reports.finish(rank, status, message, now);
                finished = true;
            }
            Request::Hello(_) => {}
        }
        let Some(steering) = &mut self.steering else { return };
        let (news, changes) = steering.reached(rank, step, lr);
        if finished {
            steering.finish(rank);
        }
        let over = finished && steering.all_finished();
        let stopped = self.stopped || steering.stopping();
        for r in records.into_iter().chain(changes.into_iter().map(Record::Event)) {
            self.record(r);
        }
        if over {
            if let Some(summary) = self.reports.summary(stopped, now) {
                self.record(summary);
            }
        }
        self.answer(conn, &Answer::Reply { controls: if finished { Vec::new() } else { news } });
    }

    fn hello(&mut self, conn: u64, hello: wire::Hello) {
        let version = match wire::agree(hello.version) {
            Ok(v) => v,
            Err(message) => {
                self.answer(conn, &Answer::Error { message });
                if let Some(c) = self.conns.remove(&conn) {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
        };
        let rank = hello.rank;
        if !self.greeted {
            let _ = self.greeting.try_send(());
        }
        self.greeted = true;
        let pid = hello.pid;
        self.all_devices.extend(hello.devices.iter().map(|d| (ScriptDevice { rank, ..d.clone() }, pid)));
        let _ = self.devices.send(self.all_devices.clone());
        let can = hello.can.clone();
        self.reports.hello(hello);
        let label = self.reports.label();
        let steering = self.steering.get_or_insert_with(|| Steering::new(&label, can));
        let controls = steering.join(rank);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.rank = Some(rank);
        }
        let run_dir = self.run_dir.clone();
        self.answer(conn, &Answer::Welcome { version, run_dir, controls });
    }
}

/// The endpoint's path for a run directory: beside the attach sockets, named after the run.
pub fn endpoint_for(run_dir: &Path) -> std::io::Result<PathBuf> {
    let name = crate::remote::registry::socket_name(run_dir);
    Ok(crate::remote::registry::socket_dir()?.join(name.replace(".sock", ".script")))
}
