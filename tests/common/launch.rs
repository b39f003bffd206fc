//! How a test runs the binary ([`Dpt`]) and waits for what it does ([`until`], [`until_record`]).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use dpt_tui::engine::Record;
use dpt_tui::record::Change;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_dpt-tui");

/// `dpt-tui` as a test runs it: [`Command`]'s builder with what the tests' launches share
/// (`--headless`, `--data`, `--run-dir`, a rank of a world on localhost, the jobs' registry in
/// the temporary directory, a wrapper program), and ends that fail the test instead of
/// returning errors. Arguments go on the
/// command line in the order they are given (a flag given twice: the later wins).
pub struct Dpt(Command);

impl Default for Dpt {
    fn default() -> Self {
        Dpt::new()
    }
}

impl Dpt {
    pub fn new() -> Dpt {
        Dpt(Command::new(BIN))
    }

    /// `program wrapper_args… dpt-tui`: the binary run by another (`taskset -c 1`, `unshare`).
    pub fn under<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        wrapper_args: impl IntoIterator<Item = S>,
    ) -> Dpt {
        let mut c = Command::new(program);
        c.args(wrapper_args).arg(BIN);
        Dpt(c)
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Dpt {
        self.0.arg(arg);
        self
    }

    pub fn args<S: AsRef<OsStr>>(&mut self, args: impl IntoIterator<Item = S>) -> &mut Dpt {
        self.0.args(args);
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Dpt {
        self.0.env(key, value);
        self
    }

    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Dpt {
        self.0.env_remove(key);
        self
    }

    /// Run from `dir` (its working directory).
    pub fn dir(&mut self, dir: impl AsRef<Path>) -> &mut Dpt {
        self.0.current_dir(dir);
        self
    }

    /// Plain progress lines, no dashboard.
    pub fn headless(&mut self) -> &mut Dpt {
        self.arg("--headless")
    }

    pub fn data(&mut self, dir: impl AsRef<Path>) -> &mut Dpt {
        self.arg("--data").arg(dir.as_ref())
    }

    pub fn run_dir(&mut self, dir: impl AsRef<Path>) -> &mut Dpt {
        self.arg("--run-dir").arg(dir.as_ref())
    }

    /// Its jobs' registry (`$XDG_RUNTIME_DIR/dpt-tui`) in the temporary directory, not the
    /// user's.
    pub fn scratch_runtime(&mut self) -> &mut Dpt {
        self.env("XDG_RUNTIME_DIR", std::env::temp_dir())
    }

    /// Rank `rank` of `world` on localhost:`port` (the rendezvous), every rank on this host,
    /// with a [`scratch_runtime`](Dpt::scratch_runtime).
    pub fn rank(&mut self, rank: usize, world: usize, port: u16) -> &mut Dpt {
        self.args(["--rank", &rank.to_string(), "--world-size", &world.to_string()])
            .args(["--master-addr", "127.0.0.1", "--master-port", &port.to_string()])
            .env("LOCAL_WORLD_SIZE", world.to_string())
            .scratch_runtime()
    }

    pub fn stdout(&mut self, to: Stdio) -> &mut Dpt {
        self.0.stdout(to);
        self
    }

    pub fn stderr(&mut self, to: Stdio) -> &mut Dpt {
        self.0.stderr(to);
        self
    }

    /// Its stdout and stderr piped to the test.
    pub fn piped(&mut self) -> &mut Dpt {
        self.stdout(Stdio::piped()).stderr(Stdio::piped())
    }

    /// Runs it to its end.
    pub fn output(&mut self) -> Output {
        self.0.output().expect("the binary runs")
    }

    /// Runs it to its end; its stdout and stderr, the test failed with them when it failed.
    pub fn ok(&mut self) -> String {
        ok(&self.output())
    }

    pub fn spawn(&mut self) -> Child {
        self.0.spawn().expect("the binary starts")
    }
}

/// A finished command's stdout and stderr; fails the test, showing them, when it failed.
pub fn ok(out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// What a condition [`until`] polls says: done with a value, or not yet (with why, for the
/// failure's message).
pub trait Polled {
    type Value;
    fn done(self) -> Result<Self::Value, Option<String>>;
}

impl Polled for bool {
    type Value = ();
    fn done(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Polled for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Polled for Result<T, E> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Polls `condition` (every 50 ms) until it is done, within `timeout`: its value, or, after
/// `timeout`, what its last poll said instead (see [`until`]).
pub fn within<P: Polled>(
    timeout: Duration,
    mut condition: impl FnMut() -> P,
) -> Result<P::Value, Option<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        match condition().done() {
            Ok(v) => return Ok(v),
            Err(why) if Instant::now() >= deadline => return Err(why),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Polls `condition` (every 50 ms) until it is done and returns its value; fails the test after
/// `timeout` saying `what` it waited for, and what the last poll said instead (an `Err`'s).
pub fn until<P: Polled>(timeout: Duration, what: &str, condition: impl FnMut() -> P) -> P::Value {
    match within(timeout, condition) {
        Ok(v) => v,
        Err(None) => panic!("no {what} within {timeout:?}"),
        Err(Some(last)) => panic!("no {what} within {timeout:?}: {last}"),
    }
}

/// Receives `records` until one is as `want` says, within `timeout`; it and the records before
/// it. A run's failure fails the test, as does a stream that ends first.
pub fn until_record(
    records: &Receiver<Record>,
    timeout: Duration,
    want: impl Fn(&Record) -> bool,
) -> (Record, Vec<Record>) {
    let deadline = Instant::now() + timeout;
    let mut before = Vec::new();
    loop {
        let r = match records.recv_deadline(deadline) {
            Ok(r) => r,
            Err(e) => panic!(
                "no record as wanted within {timeout:?} ({e}); {} others came, the last {:?}",
                before.len(),
                before.last()
            ),
        };
        if want(&r) {
            return (r, before);
        }
        assert!(!matches!(r, Record::Event(Change::Failed { .. })), "run failed: {r:?}");
        before.push(r);
    }
}
