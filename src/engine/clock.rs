//! Timing the phases of a step where the work runs. On the CPU libtorch's calls return when the
//! work is done, so the host clock is the truth. On a GPU they return once the kernels are
//! queued: host times would show the enqueue cost (allreduce near 0 %, a slow GPU hidden), so
//! the phases are timed with CUDA events recorded on the device's stream, as PyTorch's profilers
//! do. Events are never waited for: a sampled step's events are read once a later step finds,
//! with `query()` alone, that the device has passed the last of them (as the profilers read
//! theirs after the fact), so timing a step adds no sync. One step in [`GPU_SAMPLE_EVERY`] is
//! sampled on a GPU, and the figures say so. A build without CUDA events (no CUDA headers)
//! times sampled GPU steps with the host clock after a device synchronization instead.
//!
//! The first [`WARMUP_STEPS`] steps a process runs are never timed: cuDNN's algorithm search,
//! NCCL's communicator set-up, lazy kernel loading and oneDNN's primitive caches land there, and
//! would skew the first window's shares and the straggler check (as PyTorch's profiler
//! schedules skip warm-up steps).

use std::time::Instant;

use tch::Device;

use crate::device::gpu_wait::Waiting;
use dpt_sys::c10d::{C10dError, CudaEvent};

/// A GPU times one step in this many (the others run without any wait for the host).
pub const GPU_SAMPLE_EVERY: usize = 10;

/// Steps each process runs before it times any.
pub const WARMUP_STEPS: usize = 3;

/// Whether the step a process runs after `steps_run` others is timed (`on_gpu`: any replica is
/// on a GPU): none of the warm-up, then every step on the CPU, one in [`GPU_SAMPLE_EVERY`] on
/// GPUs.
pub fn sampled(on_gpu: bool, steps_run: usize) -> bool {
    steps_run >= WARMUP_STEPS && (!on_gpu || (steps_run - WARMUP_STEPS) % GPU_SAMPLE_EVERY == 0)
}

/// A point in a device's queued work: recorded where the queue stands, asked later (never
/// waited for) whether the device has passed it. CUDA's events; the tests' fakes.
pub trait DeviceMark: Send {
    fn record(&mut self) -> Result<(), C10dError>;
    /// Records on the device's side stream, where the gradient sums run (on a fake device, as
    /// [`DeviceMark::record`]).
    fn record_side(&mut self) -> Result<(), C10dError> {
        self.record()
    }
    fn passed(&self) -> Result<bool, C10dError>;
    /// Seconds from this mark to `later`, both passed.
    fn seconds_until(&self, later: &Self) -> Result<f64, C10dError>;
}

impl DeviceMark for CudaEvent {
    fn record(&mut self) -> Result<(), C10dError> {
        CudaEvent::record(self)
    }
    fn record_side(&mut self) -> Result<(), C10dError> {
        CudaEvent::record_side(self)
    }
    fn passed(&self) -> Result<bool, C10dError> {
        self.query()
    }
    fn seconds_until(&self, later: &Self) -> Result<f64, C10dError> {
        CudaEvent::seconds_until(self, later)
    }
}

enum Marks<M> {
    /// `sync`: the CUDA device to synchronize before each mark (a GPU without events).
    Host { times: Vec<Instant>, sync: Option<i64> },
    /// Marks made once, reused by every sampled step; `recorded` says how many the step being
    /// timed (or waiting to be read) holds.
    Device { marks: Vec<M>, recorded: usize },
}

/// A timed step's phases, in seconds, read after the step `step` (a process's global step).
#[derive(Debug, Clone, PartialEq)]
pub struct Phases {
    pub step: usize,
    pub seconds: Vec<f64>,
}

/// Marks the boundaries of a step's phases on one device, and reads their durations.
pub struct PhaseClock<M: DeviceMark = CudaEvent> {
    marks: Marks<M>,
    /// Whether the current step is being timed, and its number.
    on: Option<usize>,
    /// A timed step whose device marks the device had not passed when it ended.
    unread: Option<usize>,
    /// Why a GPU is timed with the host clock.
    no_events: Option<String>,
}

impl PhaseClock {
    /// A clock for `phases` phases on `device` (CUDA events are made here, once; without them
    /// the host clock with a device sync).
    pub fn new(device: Device, phases: usize) -> PhaseClock {
        let host = |sync| Marks::Host { times: Vec::with_capacity(phases + 1), sync };
        let (marks, no_events) = match device {
            Device::Cuda(i) => match (0..=phases).map(|_| CudaEvent::new(i)).collect::<Result<Vec<_>, _>>() {
                Ok(marks) => (Marks::Device { marks, recorded: 0 }, None),
                Err(e) => (host(Some(i as i64)), Some(e.0)),
            },
            _ => (host(None), None),
        };
        PhaseClock { marks, on: None, unread: None, no_events }
    }
}

impl<M: DeviceMark> PhaseClock<M> {
    /// A clock on device marks made elsewhere (`phases + 1` of them).
    pub fn with_marks(marks: Vec<M>) -> PhaseClock<M> {
        PhaseClock { marks: Marks::Device { marks, recorded: 0 }, on: None, unread: None, no_events: None }
    }

    /// What the timings are measured with, as the start record says it.
    pub fn describe(&self) -> String {
        let after = format!("after {WARMUP_STEPS} warm-up steps");
        match (&self.marks, &self.no_events) {
            (Marks::Device { .. }, _) => {
                format!("CUDA events read without waiting, one step in {GPU_SAMPLE_EVERY} {after}")
            }
            (Marks::Host { sync: Some(_), .. }, why) => format!(
                "host clock after a device sync, one step in {GPU_SAMPLE_EVERY} {after} (no CUDA events: {})",
                why.as_deref().unwrap_or("unavailable")
            ),
            (Marks::Host { sync: None, .. }, _) => format!("host clock, every step {after}"),
        }
    }

    /// Starts step `step`; `timed` says whether it is one to measure (a device whose previous
    /// timed step is still unread times nothing: its marks are taken). Marks the start.
    pub fn start(&mut self, timed: bool, step: usize) -> Result<(), C10dError> {
        self.on = (timed && self.unread.is_none()).then_some(step);
        match &mut self.marks {
            Marks::Host { times, .. } => times.clear(),
            Marks::Device { recorded, .. } if self.on.is_some() => *recorded = 0,
            Marks::Device { .. } => {}
        }
        self.mark()
    }

    /// Marks the end of the current phase (and the start of the next).
    pub fn mark(&mut self) -> Result<(), C10dError> {
        if self.on.is_none() {
            return Ok(());
        }
        match &mut self.marks {
            Marks::Host { times, sync } => {
                if let Some(i) = sync {
                    tch::Cuda::synchronize(*i);
                }
                times.push(Instant::now());
            }
            Marks::Device { marks, recorded } => {
                if let Some(e) = marks.get_mut(*recorded) {
                    e.record()?;
                    *recorded += 1;
                }
            }
        }
        Ok(())
    }

    /// Ends the step: the phases of a timed step whose marks can be read now without waiting,
    /// this one's or an earlier one's. The host clock's are read at once; device marks once the
    /// device has passed the last of them, at the end of this step or a later one.
    pub fn finish(&mut self) -> Result<Option<Phases>, C10dError> {
        let step = self.on.take();
        match &self.marks {
            Marks::Host { times, .. } => Ok(step.map(|step| Phases {
                step,
                seconds: times.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect(),
            })),
            Marks::Device { marks, recorded } => {
                self.unread = self.unread.or(step);
                let Some(step) = self.unread else { return Ok(None) };
                let marked = &marks[..*recorded];
                if !marked.last().map_or(Ok(true), DeviceMark::passed)? {
                    return Ok(None);
                }
                self.unread = None;
                let seconds =
                    marked.windows(2).map(|w| w[0].seconds_until(&w[1])).collect::<Result<_, _>>()?;
                Ok(Some(Phases { step, seconds }))
            }
        }
    }
}

/// What a wait on `device` waits for in `phase`, with `timeout` as its deadline.
pub fn waiting(phase: &str, device: impl std::fmt::Display, timeout: std::time::Duration) -> Waiting {
    Waiting { phase: phase.to_owned(), device: device.to_string(), timeout }
}

/// A device for tests whose queue the test advances.
#[cfg(test)]
pub(crate) mod fake {
    use super::DeviceMark;
    use dpt_sys::c10d::C10dError;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Each recorded mark takes the next position in the queue and a time of 10 ms per
    /// position, a mark on the side stream `side_lag` positions later; the device has passed
    /// the marks up to `reached`.
    #[derive(Clone, Default)]
    pub(crate) struct FakeDevice {
        pub(crate) queued: Arc<AtomicUsize>,
        pub(crate) reached: Arc<AtomicUsize>,
        pub(crate) side_lag: Arc<AtomicUsize>,
    }

    impl FakeDevice {
        pub(crate) fn mark(&self) -> FakeMark {
            FakeMark { device: self.clone(), at: usize::MAX }
        }
    }

    pub(crate) struct FakeMark {
        device: FakeDevice,
        at: usize,
    }

    impl DeviceMark for FakeMark {
        fn record(&mut self) -> Result<(), C10dError> {
            self.at = self.device.queued.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(())
        }
        fn record_side(&mut self) -> Result<(), C10dError> {
            self.record()?;
            self.at += self.device.side_lag.load(Ordering::SeqCst);
            Ok(())
        }
        fn passed(&self) -> Result<bool, C10dError> {
            Ok(self.device.reached.load(Ordering::SeqCst) >= self.at)
        }
        fn seconds_until(&self, later: &Self) -> Result<f64, C10dError> {
            assert!(self.passed()? && later.passed()?, "read before the device passed it");
            Ok((later.at as f64 - self.at as f64) * 0.01)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake::{FakeDevice, FakeMark};
    use std::sync::atomic::Ordering;

    fn fake_clock(device: &FakeDevice) -> PhaseClock<FakeMark> {
        PhaseClock::with_marks((0..3).map(|_| device.mark()).collect())
    }

    #[test]
    fn the_warm_up_is_never_timed_then_every_cpu_step_and_one_gpu_step_in_ten() {
        assert!((0..WARMUP_STEPS).all(|s| !sampled(false, s) && !sampled(true, s)));
        assert!((WARMUP_STEPS..40).all(|s| sampled(false, s)));
        let timed: Vec<usize> = (0..40).filter(|&s| sampled(true, s)).collect();
        assert_eq!(timed, vec![3, 13, 23, 33]);
        assert_eq!(
            PhaseClock::new(Device::Cpu, 2).describe(),
            "host clock, every step after 3 warm-up steps"
        );
    }

    #[test]
    fn host_phases_are_measured_in_order_and_untimed_steps_read_none() {
        let mut c = PhaseClock::new(Device::Cpu, 2);
        c.start(true, 7).unwrap();
        let t = Instant::now();
        while t.elapsed().as_micros() < 200 {}
        c.mark().unwrap();
        c.mark().unwrap();
        let phases = c.finish().unwrap().unwrap();
        assert_eq!((phases.step, phases.seconds.len()), (7, 2));
        assert!(phases.seconds[0] >= 200e-6 && phases.seconds[1] < phases.seconds[0], "{phases:?}");
        c.start(false, 8).unwrap();
        c.mark().unwrap();
        assert_eq!(c.finish().unwrap(), None);
    }

    #[test]
    fn device_marks_are_read_without_waiting_once_a_later_step_finds_them_passed() {
        let device = FakeDevice::default();
        let mut c = fake_clock(&device);
        c.start(true, 13).unwrap();
        c.mark().unwrap();
        c.mark().unwrap();
        // The device is behind: the step ends without its phases, and without waiting.
        assert_eq!(c.finish().unwrap(), None);
        // The next steps are untimed; while the device has not passed the last mark, nothing.
        c.start(false, 14).unwrap();
        device.reached.store(2, Ordering::SeqCst);
        assert_eq!(c.finish().unwrap(), None, "the last mark is not passed yet");
        // A sampled step while step 13 is unread times nothing: its marks are taken.
        c.start(true, 15).unwrap();
        c.mark().unwrap();
        assert_eq!(device.queued.load(Ordering::SeqCst), 3, "no mark recorded over step 13's");
        device.reached.store(3, Ordering::SeqCst);
        let phases = c.finish().unwrap().expect("step 13 read at the end of step 15");
        assert_eq!(phases.step, 13);
        assert_eq!(phases.seconds.len(), 2);
        assert!(phases.seconds.iter().all(|s| (s - 0.01).abs() < 1e-12), "{phases:?}");
        // Then the marks are free again.
        c.start(true, 16).unwrap();
        c.mark().unwrap();
        c.mark().unwrap();
        device.reached.store(6, Ordering::SeqCst);
        assert_eq!(c.finish().unwrap().map(|p| p.step), Some(16), "read at once when already passed");
    }

    #[test]
    fn a_gpu_without_cuda_events_falls_back_to_the_host_clock_and_says_why() {
        if tch::Cuda::device_count() > 0 {
            return;
        }
        // No CUDA device here: the events cannot be made, as in a build without CUDA headers.
        let c = PhaseClock::new(Device::Cuda(0), 2);
        let said = c.describe();
        assert!(
            said.starts_with(
                "host clock after a device sync, one step in 10 after 3 warm-up steps (no CUDA events: "
            ),
            "{said}"
        );
        assert!(said.contains("CUDA"), "{said}");
        let mut idle = c;
        idle.start(false, 0).unwrap();
        assert_eq!(idle.finish().unwrap(), None, "untimed steps never touch the device");
    }
}
