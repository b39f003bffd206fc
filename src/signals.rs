//! Signals as messages: a `dpt-signals` thread turns SIGINT, SIGTERM and SIGHUP into a channel
//! that the dashboard and the headless loop select on like any other source.

use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

/// A signal the program acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalMsg {
    /// SIGINT or SIGTERM (the number): stop at the next step boundary, save, exit 128 + number.
    Stop(i32),
    /// SIGHUP: the terminal is gone; training goes on headless.
    Hangup,
}

/// The signal thread; dropping it unregisters the handlers and ends the thread.
pub struct SignalWatch {
    pub messages: Receiver<SignalMsg>,
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl SignalWatch {
    /// Takes over SIGINT, SIGTERM and SIGHUP for this process.
    pub fn start() -> std::io::Result<SignalWatch> {
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = signals.handle();
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new().name("dpt-signals".into()).spawn(move || {
            for signal in signals.forever() {
                let msg = if signal == SIGHUP { SignalMsg::Hangup } else { SignalMsg::Stop(signal) };
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
        _ => "a signal",
    }
}
