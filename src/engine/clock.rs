//! Timing the phases of a step where the work runs. On the CPU libtorch's calls return when the
//! work is done, so the host clock is the truth. On a GPU they return once the kernels are
//! queued: host times would show the enqueue cost (allreduce near 0 %, a slow GPU hidden), so
//! the phases are timed with CUDA events recorded on the device's stream, as PyTorch's profilers
//! do. Reading events waits for the GPU, so only sampled steps are timed there: one step in
//! [`GPU_SAMPLE_EVERY`], and the figures say so.

use std::time::Instant;

use tch::Device;

use crate::dist::c10d::{C10dError, CudaEvent};

/// A GPU times one step in this many (the others run without any wait for the host).
pub const GPU_SAMPLE_EVERY: usize = 10;

/// What the step timings of a run were measured with (`on_gpu`: any replica is on a GPU), as
/// the start record says it.
pub fn describe(on_gpu: bool) -> String {
    if on_gpu {
        format!("CUDA events, one step in {GPU_SAMPLE_EVERY}")
    } else {
        "host clock, every step".to_owned()
    }
}

/// Whether the step `global_step` is timed (`on_gpu`: any replica is on a GPU).
pub fn sampled(on_gpu: bool, global_step: usize) -> bool {
    !on_gpu || global_step % GPU_SAMPLE_EVERY == 0
}

enum Marks {
    Host(Vec<Instant>),
    /// Events made once, reused every sampled step; `recorded` says how many this step holds.
    Cuda {
        events: Vec<CudaEvent>,
        recorded: usize,
    },
}

/// Marks the boundaries of a step's phases on one device, and reads their durations.
pub struct PhaseClock {
    marks: Marks,
    /// Whether this step is being timed.
    on: bool,
}

impl PhaseClock {
    /// A clock for `phases` phases on `device` (CUDA events are made here, once).
    pub fn new(device: Device, phases: usize) -> Result<PhaseClock, C10dError> {
        let marks = match device {
            Device::Cuda(i) => Marks::Cuda {
                events: (0..=phases).map(|_| CudaEvent::new(i)).collect::<Result<_, _>>()?,
                recorded: 0,
            },
            _ => Marks::Host(Vec::with_capacity(phases + 1)),
        };
        Ok(PhaseClock { marks, on: false })
    }

    /// Starts a step; `timed` says whether it is one to measure. Marks the start.
    pub fn start(&mut self, timed: bool) -> Result<(), C10dError> {
        self.on = timed;
        match &mut self.marks {
            Marks::Host(v) => v.clear(),
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
            Marks::Host(v) => v.push(Instant::now()),
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
    /// On a GPU this waits for the last mark to be reached.
    pub fn read(&self) -> Result<Option<Vec<f64>>, C10dError> {
        if !self.on {
            return Ok(None);
        }
        Ok(Some(match &self.marks {
            Marks::Host(v) => v.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect(),
            Marks::Cuda { events, recorded } => {
                events[..*recorded].windows(2).map(|w| w[0].seconds_until(&w[1])).collect::<Result<_, _>>()?
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_clock_times_every_step_and_gpus_one_in_ten() {
        assert!((0..25).all(|s| sampled(false, s)));
        let timed: Vec<usize> = (0..25).filter(|&s| sampled(true, s)).collect();
        assert_eq!(timed, vec![0, 10, 20]);
        assert_eq!(describe(false), "host clock, every step");
        assert_eq!(describe(true), "CUDA events, one step in 10");
    }

    #[test]
    fn host_phases_are_measured_in_order_and_untimed_steps_read_none() {
        let mut c = PhaseClock::new(Device::Cpu, 2).unwrap();
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
    fn cuda_events_on_a_machine_without_that_gpu_are_a_clean_error() {
        if tch::Cuda::device_count() > 0 {
            return;
        }
        let e = PhaseClock::new(Device::Cuda(0), 2).err().expect("no CUDA device here");
        assert!(e.0.contains("CUDA"), "{e}");
    }
}
