//! A replica's CUDA graph (`--cuda-graphs`): its forward and backward passes for batches of one
//! size captured once, on the replica's stream, and replayed with one launch. The step's inputs
//! are copied into buffers of the graph's own first (the samples, targets, dropout masks drawn
//! eagerly from the step's seed, and the loss scale's factor), since a replay reads the
//! addresses it captured. The parameters, the flat gradient and the accumulators stay where
//! they are for the whole run, so the captured work writes them in place.
//!
//! One capture at a time in the process, in thread-local mode, so the other replicas' streams
//! go on meanwhile (`engine::graph_capture`). A capture that fails (a model that synchronizes or
//! changes shape inside) is abandoned, and the step runs eagerly; the coordinator keeps that
//! replica eager from then on.

use std::sync::PoisonError;

use tch::{Device, Tensor};

use super::step::Inputs;
use super::{LossFactor, Worker, WorkerError};
use crate::engine::graph_capture::{Capturer, StandIn, CAPTURING};
use dpt_sys::c10d::CudaGraph;

/// The graph's inputs, at the addresses it captured.
struct Statics {
    x: Tensor,
    y: Tensor,
    masks: Vec<Tensor>,
    factor: LossFactor,
}

impl Statics {
    /// Buffers of the graph's own, holding this step's inputs.
    fn of((x, y, masks): Inputs, factor: &LossFactor) -> Result<Statics, WorkerError> {
        Ok(Statics {
            x: own(x)?,
            y: own(y)?,
            masks: masks.iter().map(own).collect::<Result<_, _>>()?,
            factor: match factor {
                LossFactor::Scaled(f) => LossFactor::Scaled(own(f)?),
                mean => mean.shallow_clone(),
            },
        })
    }

    /// Whether a step's inputs fit these buffers.
    fn fits(&self, (x, y, masks): Inputs, factor: &LossFactor) -> bool {
        x.size() == self.x.size()
            && y.size() == self.y.size()
            && masks.len() == self.masks.len()
            && masks.iter().zip(&self.masks).all(|(m, s)| m.size() == s.size())
            && match (factor, &self.factor) {
                // The graph's kernels carry the batch they were captured for.
                (LossFactor::Mean(asked), LossFactor::Mean(held)) => asked == held,
                (LossFactor::Scaled(_), LossFactor::Scaled(_)) => true,
                _ => false,
            }
    }

    /// Copies a step's inputs in.
    fn load(&mut self, (x, y, masks): Inputs, factor: &LossFactor) -> Result<(), WorkerError> {
        self.x.f_copy_(x)?;
        self.y.f_copy_(y)?;
        for (s, m) in self.masks.iter_mut().zip(masks) {
            s.f_copy_(m)?;
        }
        if let (LossFactor::Scaled(s), LossFactor::Scaled(f)) = (&mut self.factor, factor) {
            s.f_copy_(f)?;
        }
        Ok(())
    }
}

impl Statics {
    /// The graph's work on these buffers: one micro-batch's passes, as the step's first (no
    /// fault a graphed run can have looks at the global step).
    fn run(&self, worker: &mut Worker) -> Result<(), WorkerError> {
        worker.passes((&self.x, &self.y, &self.masks), &self.factor, (true, 0), (None, None))
    }
}

/// A buffer of `t`'s shape and layout holding a copy of it.
fn own(t: &Tensor) -> Result<Tensor, tch::TchError> {
    let mut copy = t.f_empty_like()?;
    copy.f_copy_(t)?;
    Ok(copy)
}

/// A replica's captured step.
pub(super) struct Graphed {
    capturer: Box<dyn Capturer<WorkerError>>,
    statics: Statics,
}

impl Worker {
    /// Captures the replica's step for batches of this step's size, then replays it on this
    /// step's inputs (the capture itself runs nothing). An error leaves no graph and nothing
    /// run: the caller runs the step eagerly.
    pub(super) fn capture(&mut self, inputs: Inputs, factor: &LossFactor) -> Result<(), WorkerError> {
        self.graph = None;
        if self.sink.is_some() {
            return Err(WorkerError::Capture("the gradient hooks run on the host".into()));
        }
        let capturer: Box<dyn Capturer<WorkerError>> = match self.device {
            _ if self.faults.graph_stand_in => {
                Box::new(StandIn { fails: self.faults.graph_capture_fails == Some(self.replica) })
            }
            Device::Cuda(i) => Box::new(CudaGraph::new(i)?),
            d => return Err(WorkerError::Capture(format!("{d:?} has no CUDA graphs"))),
        };
        let mut g = Graphed { capturer, statics: Statics::of(inputs, factor)? };
        {
            let _one = CAPTURING.lock().unwrap_or_else(PoisonError::into_inner);
            let s = &g.statics;
            g.capturer.capture(&mut || s.run(self))?;
        }
        let s = &g.statics;
        g.capturer.replay(&mut || s.run(self))?;
        self.graph = Some(g);
        Ok(())
    }

    /// Replays the replica's graph on this step's inputs; `false` (nothing run) when it has no
    /// graph for inputs of their shapes, and the caller runs the step eagerly.
    pub(super) fn replay(&mut self, inputs: Inputs, factor: &LossFactor) -> Result<bool, WorkerError> {
        let Some(mut g) = self.graph.take() else { return Ok(false) };
        if !g.statics.fits(inputs, factor) {
            self.graph = Some(g);
            return Ok(false);
        }
        g.statics.load(inputs, factor)?;
        let s = &g.statics;
        let ran = g.capturer.replay(&mut || s.run(self));
        self.graph = Some(g);
        ran.map(|()| true)
    }
}
