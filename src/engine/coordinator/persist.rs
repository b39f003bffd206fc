//! The coordinator's writes to the run directory: the weights and the checkpoints.

use tch::Tensor;

use super::super::checkpoint::{Checkpoint, CheckpointError, CheckpointState, PartialEpoch, CHECKPOINT_FILE};
use super::super::events::Event;
use super::super::flat::Layout;
use super::super::save_named;
use super::Coordinator;
use crate::model::TensorSpec;

impl Coordinator {
    /// The (epoch, step) that runs next, from the global step.
    pub(super) fn position_now(&self) -> (usize, usize) {
        let spe = self.cfg().steps_per_epoch(self.p.train_len);
        (self.global_step / spe, self.global_step % spe)
    }

    pub(super) fn params_finite(&self) -> bool {
        bool::try_from(self.params[0].isfinite().all()).unwrap_or(false)
    }

    /// Writes the weights of replica 0 into the run directory (nothing without one). A failed or
    /// refused write is a warning: it must not end a run.
    pub(super) fn save(&mut self) {
        let Some(dir) = self.cfg().run_dir.clone() else { return };
        if !self.params_finite() {
            self.emit(Event::Warning { message: "weights not saved: they are not finite".into() });
            return;
        }
        let path = dir.join("model.safetensors");
        match save_named(&self.named_cpu(), &path) {
            Ok(()) => {
                self.emit(Event::Saved { path: path.display().to_string(), global_step: self.global_step })
            }
            Err(e) => self.emit(Event::Warning { message: e.to_string() }),
        }
    }

    /// Writes a checkpoint that continues at `position` (nothing without a run directory; never
    /// over a good checkpoint with parameters that are not finite).
    pub(super) fn checkpoint(&mut self, position: (usize, usize)) {
        let Some(dir) = self.cfg().run_dir.clone() else { return };
        let path = dir.join(CHECKPOINT_FILE);
        if !self.params_finite() {
            self.emit(Event::Warning {
                message: "checkpoint not written: the parameters are not finite".into(),
            });
            return;
        }
        let cfg = self.cfg();
        let at_boundary = position.1 == 0;
        let partial = if at_boundary {
            PartialEpoch::default()
        } else {
            let s = self.epoch.sums;
            PartialEpoch {
                loss: s.loss,
                correct: s.correct,
                samples: s.samples,
                seconds: self.epoch.seconds(),
            }
        };
        let state = CheckpointState {
            format: 1,
            model: cfg.model.name().to_owned(),
            epoch: position.0,
            step: position.1,
            global_step: self.global_step,
            epochs: cfg.epochs,
            lr: self.lr,
            momentum: cfg.sgd.momentum,
            weight_decay: cfg.sgd.weight_decay,
            batch_size: cfg.batch_size,
            seed: cfg.seed,
            train_samples: self.p.train_len,
            test_samples: self.p.test_len,
            partial_epoch: partial,
            epochs_done: self.totals.epochs_done,
            train_seconds: self.totals.train_seconds,
            samples_done: self.totals.samples,
            last_test_acc: self.totals.last_test_acc,
            history: self.history.clone(),
        };
        let split = |flat: &Tensor, layout: &Layout, specs: &[TensorSpec]| -> Vec<(String, Tensor)> {
            specs.iter().map(|s| s.name.clone()).zip(layout.to_logical(flat, tch::Device::Cpu)).collect()
        };
        let ckpt = Checkpoint {
            state,
            params: split(&self.params[0], &self.p.param_layout, &self.p.param_specs),
            momentum: split(&self.momentum[0], &self.p.param_layout, &self.p.param_specs),
            buffers: split(&self.buffers[0], &self.p.buffer_layout, &self.p.buffer_specs),
        };
        let result = if cfg.faults.checkpoint_write {
            Err(CheckpointError::Write {
                path: path.clone(),
                message: "injected fault (DPT_INJECT_FAULT=checkpoint-write)".into(),
            })
        } else {
            ckpt.write(&path)
        };
        match result {
            Ok(()) => {
                let global_step = self.global_step;
                self.emit(Event::Checkpointed { path: path.display().to_string(), global_step })
            }
            Err(e) => self.emit(Event::Warning { message: e.to_string() }),
        }
    }
}
