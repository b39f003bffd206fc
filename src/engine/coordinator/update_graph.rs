//! The update as a CUDA graph (`--cuda-graphs`, one replica in the run): after
//! [`WARM_UP_STEPS`] eager updates the coordinator captures one on its own stream (GradScaler's
//! check, the norm and clipping, the fused optimizer reading its lr on the device, the loss
//! scale's update, the moving average) and replays it each step after, one launch where there
//! were a dozen. Nothing in it depends on the batch (the loss carries the divisor), so every
//! step replays it, the last partial batch too. The step's lr is written into a device scalar
//! before each replay. The norm is always taken inside (a reduction's launch, no host work),
//! and read only where a report asks for it, from a copy made after the replay: the graph's
//! own output is rewritten by the next replay. A capture that fails is said once and the update
//! stays eager; a restore (a rewind) puts new loss-scale tensors in place, so the graph is
//! dropped and captured again after another warm-up.

use tch::Tensor;

use crate::engine::graph_capture::{Capturer, StandIn};
use crate::engine::EngineError;
use dpt_core::settings::cuda_graphs::WARM_UP_STEPS;
use dpt_sys::c10d::optim::DeviceLr;
use dpt_sys::c10d::CudaGraph;

/// What the next update does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UpdateStep {
    Eager,
    /// Captured, then replayed.
    Capture,
    Replay,
}

enum State {
    /// Eager updates so far.
    Warming(usize),
    Captured(Box<dyn Capturer<EngineError>>),
    /// The capture failed: eager from then on.
    Failed,
}

/// The update's graph: its state, the lr it reads, its captured output.
pub(super) struct UpdateGraph {
    state: State,
    /// `Some(fails)` under the `graph-stand-in` test fault: a stand-in in the graph's place.
    stand_in: Option<bool>,
    lr: DeviceLr,
    /// The captured update's `[norm, counted]`, rewritten by each replay.
    output: Option<Tensor>,
}

impl UpdateGraph {
    /// A graph for an update on `device` (a stand-in's under the test fault).
    pub(super) fn new(device: tch::Device, stand_in: Option<bool>) -> UpdateGraph {
        UpdateGraph { state: State::Warming(0), stand_in, lr: DeviceLr::new(0.0, device), output: None }
    }

    /// What the next update does; counts an eager one towards the warm-up.
    pub(super) fn next(&mut self) -> UpdateStep {
        match &mut self.state {
            State::Warming(n) if *n >= WARM_UP_STEPS => UpdateStep::Capture,
            State::Warming(n) => {
                *n += 1;
                UpdateStep::Eager
            }
            State::Captured(_) => UpdateStep::Replay,
            State::Failed => UpdateStep::Eager,
        }
    }

    /// The lr the graph reads, set to `lr` (a fill on the device: no host sync).
    pub(super) fn lr(&mut self, lr: f64) -> Tensor {
        self.lr.set(lr);
        self.lr.tensor().shallow_clone()
    }

    /// The tensors the update works on were replaced: warm up and capture again.
    pub(super) fn forget(&mut self) {
        if !matches!(self.state, State::Failed) {
            self.state = State::Warming(0);
        }
        self.output = None;
    }

    /// Captures `work` (on `index`'s GPU, or the stand-in) and replays it, or replays what was
    /// captured; the update's `[norm, counted]`, a copy of its own. A failed capture runs
    /// nothing and gives its reason (`Ok(Err)`): the caller updates eagerly.
    pub(super) fn run(
        &mut self,
        index: Option<usize>,
        work: &mut dyn FnMut() -> Result<Tensor, EngineError>,
    ) -> Result<Result<Tensor, String>, EngineError> {
        let fresh = std::cell::RefCell::new(None);
        let mut body = || work().map(|t| *fresh.borrow_mut() = Some(t));
        if !matches!(self.state, State::Captured(_)) {
            let capturer: Result<Box<dyn Capturer<EngineError>>, EngineError> = match (self.stand_in, index) {
                (Some(fails), _) => Ok(Box::new(StandIn { fails })),
                (None, Some(i)) => CudaGraph::new(i).map(|g| Box::new(g) as Box<dyn Capturer<EngineError>>).map_err(EngineError::from),
                (None, None) => Err(EngineError::from(dpt_sys::c10d::C10dError("a CPU update has no CUDA graph".into()))),
            };
            let captured = capturer.and_then(|mut c| {
                let _one = crate::engine::graph_capture::CAPTURING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                c.capture(&mut body).map(|()| c)
            });
            match captured {
                Ok(c) => {
                    self.output = fresh.borrow_mut().take();
                    self.state = State::Captured(c);
                }
                Err(e) => {
                    self.state = State::Failed;
                    return Ok(Err(e.to_string()));
                }
            }
        }
        let State::Captured(c) = &mut self.state else { return Err(lost()) };
        c.replay(&mut body)?;
        // A stand-in ran the work again; a graph rewrote its captured output.
        let ran = fresh.borrow_mut().take();
        ran.or_else(|| self.output.as_ref().map(Tensor::copy)).map(Ok).ok_or_else(lost)
    }
}

/// The update's graph gave no output: a bug.
fn lost() -> EngineError {
    EngineError::Invariant("the update's graph gave no output")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_update_warms_up_then_captures_once_and_replays_and_a_restore_warms_it_again() {
        let mut g = UpdateGraph::new(tch::Device::Cpu, Some(false));
        let steps: Vec<UpdateStep> = (0..WARM_UP_STEPS).map(|_| g.next()).collect();
        assert!(steps.iter().all(|s| *s == UpdateStep::Eager));
        assert_eq!(g.next(), UpdateStep::Capture);
        let mut runs = 0;
        let mut work = || -> Result<Tensor, EngineError> {
            runs += 1;
            Ok(Tensor::from_slice(&[runs as f32, 1.0]))
        };
        let out = g.run(None, &mut work).unwrap().expect("the stand-in captures");
        assert_eq!(Vec::<f32>::try_from(&out).unwrap(), [1.0, 1.0], "captured, then replayed once");
        assert_eq!(g.next(), UpdateStep::Replay);
        let _ = g.run(None, &mut work).unwrap().expect("replayed");
        assert_eq!(runs, 2);
        g.forget();
        assert_eq!(g.next(), UpdateStep::Eager, "warming up again");
    }

    #[test]
    fn a_failed_capture_runs_nothing_says_why_and_stays_eager() {
        let mut g = UpdateGraph::new(tch::Device::Cpu, Some(true));
        for _ in 0..WARM_UP_STEPS {
            g.next();
        }
        assert_eq!(g.next(), UpdateStep::Capture);
        let mut runs = 0;
        let mut work = || -> Result<Tensor, EngineError> {
            runs += 1;
            Ok(Tensor::zeros([2], tch::kind::FLOAT_CPU))
        };
        let why = g.run(None, &mut work).unwrap().expect_err("the capture fails");
        assert!(why.contains("graph-capture-fails"), "{why}");
        assert_eq!(runs, 0, "nothing ran");
        assert_eq!(g.next(), UpdateStep::Eager);
        g.forget();
        assert_eq!(g.next(), UpdateStep::Eager, "a failed capture is not tried again");
    }

    #[test]
    fn the_lr_is_written_into_the_tensor_the_graph_reads() {
        let mut g = UpdateGraph::new(tch::Device::Cpu, Some(false));
        let first = g.lr(0.25);
        let again = g.lr(0.5);
        assert_eq!(first.data_ptr(), again.data_ptr(), "one tensor, written in place");
        assert_eq!(again.double_value(&[]), 0.5);
    }
}
