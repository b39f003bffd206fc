//! Timing the phases of a step where the work runs. On the CPU libtorch's calls return when the
//! work is done, so the host clock is the truth. On a GPU they return once the kernels are
//! queued: host times would show the enqueue cost (allreduce near 0 %, a slow GPU hidden), so
//! the phases are timed with CUDA events recorded on the device's stream, as PyTorch's profilers
//! do. Reading events waits for the GPU, so only sampled steps are timed there: one step in
//! [`GPU_SAMPLE_EVERY`], and the figures say so. A build without CUDA events (no CUDA headers)
//! times sampled GPU steps with the host clock after a device synchronization instead.
//!
//! The first [`WARMUP_STEPS`] steps a process runs are never timed: cuDNN's algorithm search,
//! NCCL's communicator set-up, lazy kernel loading and oneDNN's primitive caches land there, and
//! would skew the first window's shares and the straggler check (as PyTorch's profiler
//! schedules skip warm-up steps).

use std::time::{Duration, Instant};

use tch::Device;

use crate::device::gpu_wait::{WaitError, Waiting};
use crate::dist::c10d::{C10dError, CudaEvent};

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

enum Marks {
    /// `sync`: the CUDA device to synchronize before each mark (a GPU without events).
    Host { times: Vec<Instant>, sync: Option<i64> },
    /// Events made once, reused every sampled step; `recorded` says how many this step holds.
    Cuda { events: Vec<CudaEvent>, recorded: usize },
}

/// Marks the boundaries of a step's phases on one device, and reads their durations.
pub struct PhaseClock {
    marks: Marks,
    /// Whether this step is being timed.
    on: bool,
    /// Why a GPU is timed with the host clock.
    no_events: Option<String>,
    /// What reading the clock waits for, and until when.
    waiting: Waiting,
}

impl PhaseClock {
    /// A clock for `phases` phases on `device` (CUDA events are made here, once; without them
    /// the host clock with a device sync). `waiting` names what a read waits for and its
    /// deadline.
    pub fn new(device: Device, phases: usize, waiting: Waiting) -> PhaseClock {
        let host = |sync| Marks::Host { times: Vec::with_capacity(phases + 1), sync };
        let (marks, no_events) = match device {
            Device::Cuda(i) => match (0..=phases).map(|_| CudaEvent::new(i)).collect::<Result<Vec<_>, _>>() {
                Ok(events) => (Marks::Cuda { events, recorded: 0 }, None),
                Err(e) => (host(Some(i as i64)), Some(e.0)),
            },
            _ => (host(None), None),
        };
        PhaseClock { marks, on: false, no_events, waiting }
    }

    /// What the timings are measured with, as the start record says it.
    pub fn describe(&self) -> String {
        let after = format!("after {WARMUP_STEPS} warm-up steps");
        match (&self.marks, &self.no_events) {
            (Marks::Cuda { .. }, _) => format!("CUDA events, one step in {GPU_SAMPLE_EVERY} {after}"),
            (Marks::Host { sync: Some(_), .. }, why) => format!(
                "host clock after a device sync, one step in {GPU_SAMPLE_EVERY} {after} (no CUDA events: {})",
                why.as_deref().unwrap_or("unavailable")
            ),
            (Marks::Host { sync: None, .. }, _) => format!("host clock, every step {after}"),
        }
    }

    /// Starts a step; `timed` says whether it is one to measure. Marks the start.
    pub fn start(&mut self, timed: bool) -> Result<(), C10dError> {
        self.on = timed;
        match &mut self.marks {
            Marks::Host { times, .. } => times.clear(),
            Marks::Cuda { recorded, .. } => *recorded = 0,
        }
        self.mark()
    }

    /// Marks the end of the current phase (and the start of the next).
    pub fn mark(&mut self) -> Result<(), C10dError> {
        if !self.on {
            return Ok(());
        }
        match &mut self.marks {
            Marks::Host { times, sync } => {
                if let Some(i) = sync {
                    tch::Cuda::synchronize(*i);
                }
                times.push(Instant::now());
            }
            Marks::Cuda { events, recorded } => {
                if let Some(e) = events.get_mut(*recorded) {
                    e.record()?;
                    *recorded += 1;
                }
            }
        }
        Ok(())
    }

    /// The seconds of each phase marked since `start`, or `None` when this step was not timed.
    /// On a GPU this waits for the last mark to be reached, until the clock's deadline.
    pub fn read(&self) -> Result<Option<Vec<f64>>, WaitError> {
        if !self.on {
            return Ok(None);
        }
        Ok(Some(match &self.marks {
            Marks::Host { times, .. } => times.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect(),
            Marks::Cuda { events, recorded } => {
                let marked = &events[..*recorded];
                if let Some(last) = marked.last() {
                    self.waiting.poll(last)?;
                }
                marked.windows(2).map(|w| w[0].seconds_until(&w[1])).collect::<Result<_, _>>()?
            }
        }))
    }
}

/// What a clock on `device` waits for in `phase`, with the step timeout as its deadline.
pub fn waiting(phase: &str, device: impl std::fmt::Display, timeout: Duration) -> Waiting {
    Waiting { phase: phase.to_owned(), device: device.to_string(), timeout }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(device: Device) -> PhaseClock {
        PhaseClock::new(device, 2, waiting("the step", "cpu", Duration::from_secs(1)))
    }

    #[test]
    fn the_warm_up_is_never_timed_then_every_cpu_step_and_one_gpu_step_in_ten() {
        assert!((0..WARMUP_STEPS).all(|s| !sampled(false, s) && !sampled(true, s)));
        assert!((WARMUP_STEPS..40).all(|s| sampled(false, s)));
        let timed: Vec<usize> = (0..40).filter(|&s| sampled(true, s)).collect();
        assert_eq!(timed, vec![3, 13, 23, 33]);
        assert_eq!(clock(Device::Cpu).describe(), "host clock, every step after 3 warm-up steps");
    }

    #[test]
    fn host_phases_are_measured_in_order_and_untimed_steps_read_none() {
        let mut c = clock(Device::Cpu);
        c.start(true).unwrap();
        let t = Instant::now();
        while t.elapsed().as_micros() < 200 {}
        c.mark().unwrap();
        c.mark().unwrap();
        let phases = c.read().unwrap().unwrap();
        assert_eq!(phases.len(), 2);
        assert!(phases[0] >= 200e-6 && phases[1] < phases[0], "{phases:?}");
        c.start(false).unwrap();
        c.mark().unwrap();
        assert_eq!(c.read().unwrap(), None);
    }

    #[test]
    fn a_gpu_without_cuda_events_falls_back_to_the_host_clock_and_says_why() {
        if tch::Cuda::device_count() > 0 {
            return;
        }
        // No CUDA device here: the events cannot be made, as in a build without CUDA headers.
        let c = clock(Device::Cuda(0));
        let said = c.describe();
        assert!(
            said.starts_with(
                "host clock after a device sync, one step in 10 after 3 warm-up steps (no CUDA events: "
            ),
            "{said}"
        );
        assert!(said.contains("CUDA"), "{said}");
        let mut idle = c;
        idle.start(false).unwrap();
        assert_eq!(idle.read().unwrap(), None, "untimed steps never touch the device");
    }
}
