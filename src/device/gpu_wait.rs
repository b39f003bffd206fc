//! Waiting for a GPU with a deadline. A wait inside CUDA (`cudaEventSynchronize`, a blocking
//! NCCL set-up) has none: on a machine where NCCL's peer-to-peer set-up hangs (PCIe ACS on, some
//! VMs) the run would freeze without a word. So the engine polls what it waits for
//! ([`Completion`], a recorded CUDA event) and gives up at a deadline, and runs a call that can
//! only block (the first NCCL allreduce, which makes the communicators) on a helper thread it
//! stops waiting for; either way the failure names the phase and the device and says what helps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

use dpt_sys::c10d::{C10dError, CudaEvent};

/// NCCL's own advice for a set-up that hangs (its troubleshooting guide, "PCI Access Control
/// Services").
pub const NCCL_HANG_ADVICE: &str = "if NCCL's peer-to-peer set-up hangs (PCIe ACS on, some VMs), rerun with NCCL_P2P_DISABLE=1 and ask for ACS to be disabled (NCCL troubleshooting guide); 'dpt-tui doctor' checks this machine";

/// Set once a helper thread is left behind inside a call that did not return (see
/// [`Waiting::run`]).
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Whether a helper thread was left inside CUDA or NCCL: the process must then leave with
/// `_exit` once its last line is written, since a normal exit runs libtorch's and NCCL's
/// static destructors, which can block on the call that thread is still in.
pub fn abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

/// A GPU wait that failed.
#[derive(Debug, Error)]
pub enum WaitError {
    #[error("{phase} on {device} did not finish within {seconds:.0} s; {NCCL_HANG_ADVICE}")]
    Expired { phase: String, device: String, seconds: f64 },
    #[error(transparent)]
    Cuda(#[from] C10dError),
}

/// Something the GPU finishes, asked without waiting.
pub trait Completion {
    fn done(&self) -> Result<bool, C10dError>;
}

impl Completion for CudaEvent {
    fn done(&self) -> Result<bool, C10dError> {
        self.query()
    }
}

/// What is being waited for, named in the error.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub phase: String,
    pub device: String,
    pub timeout: Duration,
}

impl Waiting {
    fn expired(&self) -> WaitError {
        WaitError::Expired {
            phase: self.phase.clone(),
            device: self.device.clone(),
            seconds: self.timeout.as_secs_f64(),
        }
    }

    /// Polls `work` until it is done or the timeout passes, yielding the core between polls
    /// and then sleeping [`pause_after`]: never longer than a sixteenth of the wait so far, so
    /// a poll adds at most about 6 % to any wait (a step's tail is usually microseconds away).
    pub fn poll(&self, work: &impl Completion) -> Result<(), WaitError> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        loop {
            if work.done()? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.expired());
            }
            match pause_after(now - start) {
                None => std::thread::yield_now(),
                Some(pause) => std::thread::sleep(pause.min(deadline - now)),
            }
        }
    }

    /// Waits, until the timeout, for the work queued so far on `device`'s current stream: an
    /// event recorded there, polled. Put before a host read of a device value (`.item()`), which
    /// would otherwise wait inside CUDA without a deadline behind a collective that never ends.
    /// Nothing to wait for on the CPU, where every call has returned when its work is done.
    pub fn fence(&self, device: tch::Device) -> Result<(), WaitError> {
        let tch::Device::Cuda(i) = device else { return Ok(()) };
        let mut event = CudaEvent::ordering(i)?;
        event.record()?;
        self.poll(&event)
    }

    /// Runs `call` (which may block inside CUDA or NCCL with no deadline of its own) on a helper
    /// thread named `name`, and waits for it until the timeout. On expiry the thread is left
    /// behind ([`abandoned`] says so): it ends with the process, which fails with the error.
    pub fn run<T: Send + 'static>(
        &self,
        name: &str,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, WaitError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let _ = tx.send(call());
            })
            .map_err(|e| C10dError(format!("cannot start a thread: {e}")))?;
        rx.recv_timeout(self.timeout).map_err(|_| {
            ABANDONED.store(true, Ordering::SeqCst);
            self.expired()
        })
    }
}

/// How long a poll that has waited `waited` pauses before the next: none (a yield) for the first
/// 200 µs, then a sixteenth of the wait so far, at most 1 ms.
fn pause_after(waited: Duration) -> Option<Duration> {
    const SPIN: Duration = Duration::from_micros(200);
    (waited >= SPIN).then(|| (waited / 16).min(Duration::from_millis(1)))
}

/// A deadline on a call that must stay on its own thread (one made through the process group,
/// which that thread holds): a watchdog thread acts if the call has not returned by then.
/// Nothing cancels a call inside NCCL, so the action the run takes is to say why and leave (see
/// [`Watchdog::leave_on_expiry`]). Dropping the watchdog disarms it.
pub struct Watchdog {
    done: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Arms a watchdog for `waiting`: past its timeout, `on_expiry` gets the error's line.
    pub fn arm(
        waiting: &Waiting,
        on_expiry: impl FnOnce(String) + Send + 'static,
    ) -> std::io::Result<Watchdog> {
        let (done, disarmed) = crossbeam_channel::bounded::<()>(0);
        let (line, timeout) = (waiting.expired().to_string(), waiting.timeout);
        let thread = std::thread::Builder::new().name("dpt-watchdog".into()).spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = disarmed.recv_timeout(timeout) {
                on_expiry(line);
            }
        })?;
        Ok(Watchdog { done: Some(done), thread: Some(thread) })
    }

    /// The run's action on expiry: the line on stderr, as the binary writes a failure, then
    /// `_exit(1)` past the thread still inside the call.
    pub fn leave_on_expiry(line: String) {
        use std::io::Write;
        eprintln!("dpt-tui: {line}");
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        crate::sys::exit_at_once(1);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Done after `after` polls (never, with `u32::MAX`).
    struct Fake {
        polls: Cell<u32>,
        after: u32,
    }

    impl Completion for Fake {
        fn done(&self) -> Result<bool, C10dError> {
            self.polls.set(self.polls.get() + 1);
            Ok(self.polls.get() > self.after)
        }
    }

    fn waiting(ms: u64) -> Waiting {
        Waiting {
            phase: "the allreduce and update".into(),
            device: "cuda:3".into(),
            timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_poll_sleeps_no_more_than_a_sixteenth_of_the_wait_so_far() {
        assert_eq!(pause_after(Duration::from_micros(50)), None, "a short wait only yields");
        for waited in [200u64, 1_000, 4_000, 16_000, 100_000, 10_000_000] {
            let waited = Duration::from_micros(waited);
            let pause = pause_after(waited).expect("sleeps");
            assert!(pause <= waited / 16 && pause <= Duration::from_millis(1), "{waited:?}: {pause:?}");
            assert!(pause > Duration::ZERO);
        }
    }

    #[test]
    fn an_event_that_never_completes_fails_at_the_deadline_naming_phase_device_and_advice() {
        let never = Fake { polls: Cell::new(0), after: u32::MAX };
        let started = Instant::now();
        let e = waiting(50).poll(&never).expect_err("never completes");
        assert!(started.elapsed() >= Duration::from_millis(50));
        let text = e.to_string();
        for needle in
            ["the allreduce and update on cuda:3", "within 0 s", "NCCL_P2P_DISABLE=1", "ACS", "doctor"]
        {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        assert!(!text.contains('\n'));
        assert!(never.polls.get() > 1, "polled, not waited once");
    }

    #[test]
    fn an_event_that_completes_is_waited_for() {
        let soon = Fake { polls: Cell::new(0), after: 150 };
        waiting(10_000).poll(&soon).expect("completes on the 151st poll");
        assert_eq!(soon.polls.get(), 151);
    }

    #[test]
    fn a_query_error_is_reported_as_such() {
        struct Broken;
        impl Completion for Broken {
            fn done(&self) -> Result<bool, C10dError> {
                Err(C10dError("CUDA error: an illegal memory access was encountered".into()))
            }
        }
        assert!(matches!(waiting(1000).poll(&Broken), Err(WaitError::Cuda(_))));
    }

    #[test]
    fn a_watchdog_acts_on_a_call_that_overruns_and_not_on_one_that_returns() {
        let (said, heard) = crossbeam_channel::unbounded();
        let quick = Watchdog::arm(&waiting(10_000), move |line| said.send(line).unwrap()).unwrap();
        drop(quick);
        assert!(heard.try_recv().is_err(), "disarmed in time: nothing said");
        let (said, heard) = crossbeam_channel::unbounded();
        let slow = Watchdog::arm(&waiting(20), move |line| said.send(line).unwrap()).unwrap();
        let line = heard.recv_timeout(Duration::from_secs(10)).expect("the watchdog acts");
        assert!(line.starts_with("the allreduce and update on cuda:3 did not finish within 0 s"), "{line}");
        drop(slow);
    }

    #[test]
    fn a_call_that_blocks_is_given_up_at_the_deadline() {
        let (_keep, never) = crossbeam_channel::bounded::<()>(0);
        let e = waiting(50).run("dpt-test-blocked", move || never.recv()).expect_err("blocks");
        assert!(matches!(e, WaitError::Expired { .. }));
        assert!(abandoned(), "the process must leave with _exit");
        assert_eq!(waiting(10_000).run("dpt-test-quick", || 7).unwrap(), 7);
    }
}
