//! Signals as messages: a `dpt-signals` thread turns SIGINT, SIGTERM, SIGHUP and the preemption
//! signal (SIGUSR1 unless told otherwise: Slurm's `--signal=USR1@120` convention) into a
//! channel that the dashboard and the headless loop select on like any other source.

use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::{Handle, Signals};

/// A signal the program acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalMsg {
    /// SIGINT or SIGTERM (the number): stop at the next step boundary, save, exit 128 + number.
    Stop(i32),
    /// SIGHUP: the terminal is gone; training goes on headless.
    Hangup,
    /// The preemption signal: checkpoint at the next step boundary on every rank, exit
    /// [`EX_TEMPFAIL`].
    Preempt(i32),
}

/// The exit status of a preempted run (`EX_TEMPFAIL` of sysexits.h: try again), on every rank.
pub const EX_TEMPFAIL: u8 = 75;

/// `--preempt-signal`: the signal a scheduler sends before it preempts the job.
pub fn parse_preempt_signal(s: &str) -> Result<i32, String> {
    match s.trim_start_matches("SIG") {
        "USR1" => Ok(SIGUSR1),
        "USR2" => Ok(SIGUSR2),
        "TERM" => Ok(SIGTERM),
        "INT" => Ok(SIGINT),
        _ => Err(format!("unknown preemption signal '{s}'; use USR1, USR2, TERM or INT")),
    }
}

/// The signal thread; dropping it unregisters the handlers and ends the thread.
pub struct SignalWatch {
    pub messages: Receiver<SignalMsg>,
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl SignalWatch {
    /// Takes over SIGINT, SIGTERM, SIGHUP and `preempt` (which then means preemption, even
    /// when it is SIGTERM or SIGINT) for this process.
    pub fn start(preempt: i32) -> std::io::Result<SignalWatch> {
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, preempt])?;
        let handle = signals.handle();
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new().name("dpt-signals".into()).spawn(move || {
            for signal in signals.forever() {
                let msg = match signal {
                    s if s == preempt => SignalMsg::Preempt(s),
                    SIGHUP => SignalMsg::Hangup,
                    s => SignalMsg::Stop(s),
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
        })?;
        Ok(SignalWatch { messages: rx, handle, thread: Some(thread) })
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The conventional exit status after a signal.
pub fn exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(1)
}

/// The signal's name, for messages.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        SIGUSR1 => "SIGUSR1",
        SIGUSR2 => "SIGUSR2",
        _ => "a signal",
    }
}
