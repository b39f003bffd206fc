//! The run's state as a checkpoint: every part's own, at one step boundary. Held as views of
//! the training tensors for a write that ends before the next step, or landed on the host
//! without a drain for what outlives the step ([`InFlight`]: a rewind point, a periodic
//! checkpoint), read once its copies have arrived.

use tch::Tensor;

use super::{Coordinator, Held};
use crate::device::gpu_wait::{WaitError, Waiting};
use crate::device::landing::{Arrival, Landing};
use crate::engine::optim::loss_scale::{finite, ScalerFigures};
use crate::engine::EngineError;
use crate::persist::checkpoint::{Checkpoint, CheckpointState};
use crate::persist::resume::Resume;
use dpt_core::tally::Tally;

/// A checkpoint whose tensors are on their way to the host: views of page-locked memory that
/// the copies fill, with the weights' finiteness check and the loss scaler's state, landed
/// with them.
pub struct InFlight {
    checkpoint: Checkpoint,
    arrival: Arrival,
    /// Replica 0's finiteness check ([`crate::engine::optim::loss_scale::non_finite`]).
    non_finite: Tensor,
    /// The loss scaler's figures and their host copy.
    scaler: Option<(ScalerFigures, Tensor)>,
}

impl InFlight {
    /// A checkpoint on the host already, of weights that were `finite` or not (a test's).
    #[cfg(test)]
    pub fn at_once(checkpoint: Checkpoint, finite: bool) -> InFlight {
        let non_finite = Tensor::from_slice(&[if finite { 0.0f32 } else { 1.0 }]);
        InFlight { checkpoint, arrival: Arrival::at_once(), non_finite, scaler: None }
    }

    /// The global step the checkpoint continues after.
    pub fn global_step(&self) -> usize {
        self.checkpoint.state.global_step
    }

    /// Whether the copies have arrived (never waits).
    pub fn arrived(&self) -> Result<bool, WaitError> {
        Ok(self.arrival.arrived()?)
    }

    /// The checkpoint, once its copies have arrived (polled against `waiting`'s deadline);
    /// none when the weights were not finite.
    pub fn arrive(self, waiting: &Waiting) -> Result<Option<Checkpoint>, WaitError> {
        self.arrival.wait(waiting)?;
        if !finite(&self.non_finite) {
            return Ok(None);
        }
        let mut checkpoint = self.checkpoint;
        checkpoint.state.loss_scaler = self.scaler.map(|(s, host)| s.read(&host));
        Ok(Some(checkpoint))
    }
}

impl Coordinator {
    /// The run's state as a checkpoint that continues at `position`, each part's own: the step
    /// plan's count and lr, the reporter's finished epochs and the epoch so far, the update's
    /// tensors and loss scale, the best evaluations kept; held as `held` says. Where the
    /// optimizer state is split over the ranks, every rank takes it (or its part,
    /// [`Coordinator::snapshot_for`]) at the same point.
    pub(super) fn snapshot(&self, position: (usize, usize), held: Held) -> Result<Checkpoint, EngineError> {
        let cfg = &self.cfg;
        let done = self.report.done();
        let partial = if position.1 == 0 { Tally::default() } else { self.report.epoch_so_far() };
        let state = CheckpointState {
            epoch: position.0,
            step: position.1,
            global_step: self.steps.global_step(),
            lr: self.steps.lr(),
            lr_scale: self.steps.scale(),
            // Landed, the scaler's state comes with the tensors ([`InFlight::arrive`]).
            loss_scaler: match held {
                Held::Views => self.update.scaler_state(),
                Held::Landed(_) | Held::LandedInOrder(_) => None,
            },
            best: self.persist.best_state(),
            train_samples: self.facts.train_len,
            test_samples: self.facts.test_len,
            partial_epoch: partial,
            epochs_done: done.epochs,
            train_seconds: done.tally.seconds,
            samples_done: done.tally.samples,
            last_test_acc: done.last_test_acc,
            continued: cfg.kit.resume.as_deref().and_then(Resume::continued),
            ..CheckpointState::new(cfg.settings.clone(), cfg.normalization.clone())
        };
        let t = self.update.tensors(held, self.exchange.world())?;
        Ok(Checkpoint { state, params: t.params, optimizer: t.optimizer, buffers: t.buffers, ema: t.ema })
    }

    /// The checkpoint at `position` where this rank `keep`s it (writes it); else, where the
    /// optimizer state is split over the ranks, this rank's part in another's gathering it.
    pub(super) fn snapshot_for(
        &self,
        keep: bool,
        position: (usize, usize),
        held: Held,
    ) -> Result<Option<Checkpoint>, EngineError> {
        if keep {
            return self.snapshot(position, held).map(Some);
        }
        if self.split() {
            self.update.replicas().by_name(self.exchange.world()).lend_shards()?;
        }
        Ok(None)
    }

    /// The checkpoint at `position` landed on the host without waiting ([`InFlight`]) where
    /// this rank keeps it; else, where the optimizer state is split over the ranks, this rank's
    /// part in another's gathering it. Every rank takes part alike: whether the weights were
    /// finite is read once the copies have arrived.
    pub(super) fn land_for(&mut self, keep: bool, position: (usize, usize)) -> Result<Option<InFlight>, EngineError> {
        let landing = Landing::new();
        let Some(checkpoint) = self.snapshot_for(keep, position, Held::Landed(&landing))? else {
            return Ok(None);
        };
        let non_finite = landing.land(&self.update.replicas().non_finite_params())?;
        let scaler = match self.update.scaler_figures_now() {
            Some(s) => {
                let host = landing.land(&s.figures)?;
                Some((s, host))
            }
            None => None,
        };
        let (arrival, fence) = landing.finish()?;
        self.update.landed(fence);
        Ok(Some(InFlight { checkpoint, arrival, non_finite, scaler }))
    }
}
