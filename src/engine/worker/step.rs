//! A worker's training step: its shard's batch, then the forward and backward passes run
//! eagerly (in `--accumulate` micro-batches, with the gradient hooks when buckets reduce during
//! the backward pass) or through the replica's CUDA graph (`graphed`), the gradient written
//! into the flat buffer and the loss and correct predictions added on the device.

use tch::{Kind, Tensor};

use super::{FromWorker, LossFactor, StepGraph, Worker, WorkerError};
use crate::input::batches::Batch;
use crate::input::shard::shards;
use crate::model::Forward;
use crate::engine::loss::Scored;
use dpt_core::seed::mix_seed;
use dpt_sys::c10d::flops::FlopCount;
use dpt_sys::c10d::OwnRng;

/// A micro-batch's inputs: the samples, their targets and the dropout masks.
pub(super) type Inputs<'a> = (&'a Tensor, &'a Tensor, &'a [Tensor]);

/// The command's figures for one step.
pub(super) struct StepAsk {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) global_step: usize,
    pub(super) loss_factor: LossFactor,
    pub(super) dropout_seed: i64,
    pub(super) timed: bool,
    pub(super) graph: StepGraph,
}

impl Worker {
    pub(super) fn step(&mut self, ask: StepAsk) -> Result<FromWorker, WorkerError> {
        let StepAsk { start, len, global_step, loss_factor, dropout_seed, timed, graph } = ask;
        self.clock.start(timed, global_step)?;
        let Batch { x, y, bad, loader } = self.batches.train(start, len)?;
        let len = x.size()[0] as usize;
        let mut counted = None;
        let mut uncaptured = None;
        if len == 0 {
            // A last batch smaller than the replica count leaves this shard empty (as does a
            // streamed batch none of whose images decode); under --zero 2 the sink's bucket
            // buffers start at zero, and the gradient buffer is the coordinator's.
            if self.grad_views.len() == self.trainable.len() {
                let _ = self.grads.zero_();
            }
            self.clock.mark()?;
        } else {
            let masks = self.dropout_masks(len as i64, dropout_seed)?;
            self.clock.mark()?;
            let inputs = (&x, &y, masks.as_slice());
            let graphed = match graph {
                StepGraph::Eager => false,
                StepGraph::Capture => match self.capture(inputs, &loss_factor) {
                    Ok(()) => true,
                    Err(why) => {
                        uncaptured = Some(why.to_string());
                        false
                    }
                },
                StepGraph::Replay => self.replay(inputs, &loss_factor)?,
            };
            if !graphed {
                counted = self.eager_passes(inputs, &loss_factor, global_step, dropout_seed)?;
            }
            self.samples += len as f64;
        }
        if let Some((_, ms)) = self.faults.slow_replica.filter(|(r, _)| *r == self.replica) {
            // Stands in for a throttled or shared device: this replica's forward and backward
            // passes take longer (its data phase is the loader's).
            std::thread::sleep(std::time::Duration::from_millis(ms as u64));
        }
        self.clock.mark()?;
        let timing = self.clock.finish()?;
        Ok(FromWorker::StepDone { replica: self.replica, timing, bad, loader, flops: counted, uncaptured })
    }

    /// The forward and backward passes kernel by kernel: the shard in micro-batches, their
    /// gradients summed here (the coordinator's allreduce runs once per step whatever their
    /// number). The FLOPs of one sample's forward pass, on the first step that has samples.
    fn eager_passes(
        &mut self,
        (x, y, masks): Inputs,
        loss_factor: &LossFactor,
        global_step: usize,
        dropout_seed: i64,
    ) -> Result<Option<f64>, WorkerError> {
        let len = x.size()[0] as usize;
        let micro = shards(len, self.accumulate.min(len));
        let last = micro.len() - 1;
        let mut counted = None;
        for (i, (at, n)) in micro.into_iter().enumerate() {
            let (at, n) = (at as i64, n as i64);
            if let Some(sink) = &self.sink {
                sink.begin(i == 0, i == last);
            }
            let micro_masks: Vec<Tensor> = masks.iter().map(|m| m.narrow(0, at, n)).collect();
            let (x, y) = (x.narrow(0, at, n), y.narrow(0, at, n));
            // A network drawing its own random numbers gets this replica's stream, seeded per
            // micro-batch, for its forward pass (the backward pass draws nothing).
            let rng = match self.net.draws_inside() {
                true => {
                    let seed = if i == 0 { dropout_seed } else { mix_seed(dropout_seed as u64, i as u64) as i64 };
                    Some(OwnRng::open(seed, self.device)?)
                }
                false => None,
            };
            // The model's FLOPs are counted once, from the first forward pass it runs; a
            // counter that cannot open costs the run its MFU figure, nothing else.
            let counter = match self.flops_per_sample {
                None if n > 0 => FlopCount::start().ok().map(|c| (c, n)),
                _ => None,
            };
            let counting = counter.is_some();
            self.passes((&x, &y, &micro_masks), loss_factor, (i == 0, global_step), (rng, counter))?;
            if counting {
                counted = self.flops_per_sample;
            }
        }
        if let Some(sink) = &self.sink {
            sink.settle()?;
        }
        Ok(counted)
    }

    /// One micro-batch's forward and backward passes (`first`: the step's first, whose
    /// gradient is copied, not added), its gradient written and its loss and correct
    /// predictions added; what a replica's graph captures. `rng` is held over the forward pass
    /// only; `counter` counts its FLOPs.
    pub(super) fn passes(
        &mut self,
        (x, y, masks): Inputs,
        loss_factor: &LossFactor,
        (first, global_step): (bool, usize),
        (rng, counter): (Option<OwnRng>, Option<(FlopCount, i64)>),
    ) -> Result<(), WorkerError> {
        let ctx = Forward { train: true, masks, precision: self.precision };
        let scored = self.score(x, y, &ctx, self.label_smoothing);
        if let Some((c, n)) = counter {
            self.flops_per_sample = Some(c.total() / n as f64);
        }
        drop(rng);
        let Scored { mut loss, outputs } = scored?;
        if self.faults.nan_loss_from.is_some_and(|s| global_step >= s) {
            loss = loss.g_mul_scalar(f64::NAN);
        }
        let inputs: Vec<&Tensor> = self.trainable.iter().map(|&i| &self.params.views[i]).collect();
        let scaled = self.scaled(&loss, loss_factor, global_step);
        let grads = Tensor::f_run_backward(&[&scaled], &inputs, false, false)?;
        let _guard = tch::no_grad_guard();
        match &self.sink {
            // What the hooks did not see (a parameter the pass did not reach).
            Some(sink) => {
                for (k, g) in grads.iter().enumerate() {
                    sink.fill(k, g)?;
                }
            }
            None => {
                for (view, g) in self.grad_views.iter_mut().zip(&grads) {
                    if first {
                        view.copy_(g);
                    } else {
                        let _ = view.g_add_(g);
                    }
                }
            }
        }
        let _ = self.loss_sum.f_add_(&loss.detach())?;
        if let Some(out) = outputs {
            let _ = self.correct.f_add_(&out.argmax(-1, false).eq_tensor(y).sum(Kind::Int64))?;
        }
        Ok(())
    }
}
