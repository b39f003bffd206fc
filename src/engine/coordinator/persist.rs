//! The coordinator's writes: the weights (`model.safetensors`) and checkpoints, atomically, and
//! the final save, which never lets a run end as done while its weights exist only in memory.

use std::path::{Path, PathBuf};

use tch::Tensor;

use super::writer::{keep_newest, CheckpointWriter, Job, Written};
use super::Coordinator;
use crate::engine::config::SavePolicy;
use crate::engine::events::Control;
use crate::engine::optim::loss_scale::LossScaler;
use crate::engine::EngineError;
use crate::model::script::ScriptModel;
use crate::persist::checkpoint::{Checkpoint, CheckpointError, CheckpointState, CHECKPOINT_FILE};
use crate::persist::tensor_file;
use crate::record::Change;

/// The weights' file name inside a run directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// The weights' moving average (`--ema`) beside the raw weights.
pub const EMA_WEIGHTS_FILE: &str = "model_ema.safetensors";

/// Writes named tensors as safetensors at `path`, atomically.
pub fn save_named(tensors: &[(String, Tensor)], path: &Path) -> Result<(), EngineError> {
    tensor_file::write(tensors, path).map_err(|cause| EngineError::Save { path: path.to_owned(), cause })
}

/// The trained TorchScript model in a run directory (`torch.jit.load` reads it).
pub const SCRIPT_FILE: &str = "model.pt";

/// Writes the user's TorchScript model with the trained `named` tensors to `path`, atomically.
fn save_script(script: &ScriptModel, named: &[(String, Tensor)], path: &Path) -> Result<(), EngineError> {
    crate::atomic::write_with(path, |tmp| script.export(named, tmp).map_err(std::io::Error::other))
        .map_err(|cause| EngineError::Save { path: path.to_owned(), cause })
}

impl Coordinator {
    /// The (epoch, step) of the data that trains next: the loop's place, which a rewind's skip
    /// puts ahead of the global step's.
    pub(super) fn position_now(&self) -> (usize, usize) {
        self.data_at
    }

    /// Whether replica 0's parameters are all finite: the fused check, read once the device has
    /// reached it (within the step timeout; an expired wait is the run's failure).
    pub(super) fn params_finite(&self) -> Result<bool, EngineError> {
        let found = self.update.replicas.non_finite_params();
        self.fence("the weights' finiteness check").fence(found.device())?;
        Ok(LossScaler::finite(&found))
    }

    /// Saves into `dir` from now on (after a failed save on a full disk); false if refused.
    pub(super) fn set_save_dir(&mut self, dir: PathBuf) -> bool {
        match std::fs::create_dir_all(&dir) {
            Ok(()) => {
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                self.emit(Change::Warning {
                    message: format!("saving weights and checkpoints into {} from now on", dir.display()),
                });
                self.persist.save_dir = Some(dir);
                true
            }
            Err(e) => {
                self.emit(Change::Refused {
                    reason: format!("cannot use {} to save into: {e}", dir.display()),
                });
                false
            }
        }
    }

    /// Writes the weights and a checkpoint that continues at `position`, reporting each; on a
    /// failure says what failed and how to retry (`advice`). Parameters that are not finite
    /// are never written over good files.
    pub(super) fn save_all(&mut self, position: (usize, usize), advice: &str) -> Result<(), EngineError> {
        let Some(dir) = self.persist.save_dir.clone() else { return Ok(()) };
        if !self.params_finite()? {
            self.emit(Change::Warning {
                message: "weights and checkpoint not saved: they are not finite".into(),
            });
            return Ok(());
        }
        let global_step = self.steps.global_step;
        let path = dir.join(WEIGHTS_FILE);
        let named = self.update.replicas.named_cpu();
        let result = save_named(&named, &path).and_then(|()| {
            self.emit(Change::Saved { path: path.display().to_string(), global_step });
            if let Some((p, b)) = self.update.replicas.ema_by_name() {
                let ema_path = dir.join(EMA_WEIGHTS_FILE);
                save_named(&p.into_iter().chain(b).collect::<Vec<_>>(), &ema_path)?;
                self.emit(Change::Saved { path: ema_path.display().to_string(), global_step });
            }
            if let Some(script) = self.cfg().kit.script.clone() {
                let module = dir.join(SCRIPT_FILE);
                save_script(&script, &named, &module)?;
                self.emit(Change::Saved { path: module.display().to_string(), global_step });
            }
            let path = self.write_checkpoint(&dir, position)?;
            keep_newest(&path, global_step, self.cfg().settings.checkpoints.keep);
            Ok(path)
        });
        match result {
            Ok(path) => {
                self.emit(Change::Checkpointed { path: path.display().to_string(), global_step });
                Ok(())
            }
            Err(e) => {
                let path = match &e {
                    EngineError::Save { path, .. } => path.display().to_string(),
                    _ => dir.display().to_string(),
                };
                let message = crate::root_cause(&e);
                self.emit(Change::SaveFailed { path, message, advice: advice.to_owned() });
                Err(e)
            }
        }
    }

    /// After the evaluation of `epoch` (1-based): keeps it among the best K (weights and a
    /// checkpoint in `best/epoch-E/`, the evicted ones removed) and decides an early stop.
    pub(super) fn choose_best(&mut self, epoch: usize, loss: f64, acc: f64) {
        let metric = self.persist.best.metric;
        let value = metric.of(loss, acc);
        let d = self.persist.best.observe(epoch, value);
        if let (true, Some(dir)) = (d.keep, self.persist.save_dir.clone()) {
            let best = dir.join("best").join(format!("epoch-{epoch}"));
            let saved = std::fs::create_dir_all(&best)
                .map_err(|cause| EngineError::Save { path: best.clone(), cause })
                .and_then(|()| save_named(&self.update.replicas.named_cpu(), &best.join(WEIGHTS_FILE)))
                .and_then(|()| self.write_checkpoint(&best, (epoch, 0)).map(drop).map_err(EngineError::from));
            match saved {
                Ok(()) => self.emit(Change::BestKept {
                    epoch,
                    metric: metric.name().to_owned(),
                    value,
                    path: best.display().to_string(),
                }),
                Err(e) => self.emit(Change::Warning { message: crate::error_chain(&e) }),
            }
            for old in d.evict {
                let _ = std::fs::remove_dir_all(dir.join("best").join(format!("epoch-{old}")));
            }
        }
        if d.stop {
            if let (Some((best_epoch, best)), Some(patience)) =
                (self.persist.best.best, self.persist.best.patience)
            {
                self.emit(Change::EarlyStopped {
                    epoch,
                    best_epoch,
                    metric: metric.name().to_owned(),
                    best,
                    patience,
                });
            }
            self.flow.end(crate::record::FinishReason::EarlyStopped);
        }
    }

    /// The periodic checkpoint, if one is due after the step that made `global_step` steps
    /// (`epoch_end`: the 1-based epoch that step ended), continuing at `position`.
    pub(super) fn checkpoint_if_due(&mut self, epoch_end: Option<usize>, position: (usize, usize)) {
        let every = self.cfg().settings.checkpoints.every;
        // A step-or-time checkpoint due on an epoch's last step waits for its evaluation.
        let last_of_epoch = epoch_end.is_none() && position.1 == 0;
        let finished = self.finished(position);
        if last_of_epoch
            || finished
            || !every.due(self.steps.global_step, epoch_end, self.persist.last_checkpoint.elapsed())
        {
            return;
        }
        self.checkpoint_or_warn(position);
    }

    /// The periodic checkpoint, copied to the host here and written by the checkpoint thread;
    /// a failure is a warning (the previous checkpoint is intact).
    fn checkpoint_or_warn(&mut self, position: (usize, usize)) {
        let Some(dir) = self.persist.save_dir.clone() else { return };
        self.persist.last_checkpoint = std::time::Instant::now();
        match self.params_finite() {
            Ok(true) => {}
            Ok(false) => {
                self.emit(Change::Warning {
                    message: "checkpoint not written: the parameters are not finite".into(),
                });
                return;
            }
            // The device did not answer: the next step's own deadline ends the run.
            Err(e) => {
                self.emit(Change::Warning { message: format!("checkpoint not written: {e}") });
                return;
            }
        }
        let path = dir.join(CHECKPOINT_FILE);
        if self.cfg().kit.faults.checkpoint_write {
            let e = CheckpointError::Write {
                path,
                cause: std::io::Error::other("injected fault (DPT_INJECT_FAULT=checkpoint-write)"),
            };
            self.emit(Change::Warning { message: crate::error_chain(&e) });
            return;
        }
        if self.persist.writer.is_none() {
            match CheckpointWriter::spawn() {
                Ok(w) => self.persist.writer = Some(w),
                Err(e) => {
                    self.emit(Change::Warning {
                        message: format!("cannot start the checkpoint thread: {e}"),
                    });
                    return;
                }
            }
        }
        let job = Job {
            checkpoint: self.checkpoint_at(position),
            path,
            global_step: self.steps.global_step,
            keep: self.cfg().settings.checkpoints.keep,
        };
        let finished = self.persist.writer.as_mut().map(|w| w.submit(job)).unwrap_or_default();
        self.report_written(finished);
    }

    /// Says how the checkpoint writes that have ended went; `wait`: first waits for the one in
    /// flight.
    pub(super) fn note_written(&mut self, wait: bool) {
        let finished = match self.persist.writer.as_mut() {
            Some(w) if wait => w.wait(),
            Some(w) => w.finished(),
            None => return,
        };
        self.report_written(finished);
    }

    fn report_written(&mut self, finished: Vec<Written>) {
        for w in finished {
            match w.result {
                Ok(path) => self.emit(Change::Checkpointed {
                    path: path.display().to_string(),
                    global_step: w.global_step,
                }),
                Err(e) => self.emit(Change::Warning { message: crate::error_chain(&e) }),
            }
        }
    }

    /// The save when the run ends or stops. If it fails, the weights are still in memory: by
    /// the [`SavePolicy`], wait for the user to free space or name another folder, or retry a
    /// few times; a run whose weights could not be saved ends as failed, never as done.
    pub(super) fn final_save(&mut self, position: (usize, usize)) -> Result<(), EngineError> {
        match self.cfg().save_policy {
            SavePolicy::WaitForUser => {
                let advice = "paused with the weights in memory: free some space and press s to retry, or S to save into another folder; q gives up";
                let Err(mut failure) = self.save_all(position, advice) else { return Ok(()) };
                // Shown as paused while the weights wait in memory; the loop itself is over.
                if !self.flow.is_paused() {
                    self.emit(Change::Paused { global_step: self.steps.global_step });
                }
                loop {
                    let control = match self.channels.controls.recv() {
                        Ok(c) => c,
                        // Nobody can steer the run any more.
                        Err(_) => return Err(failure),
                    };
                    match control {
                        Control::SaveNow | Control::Resume => {}
                        // Nothing trains any more: there is no boundary to hold.
                        Control::Hold { .. } => continue,
                        Control::SaveTo { dir } => {
                            if !self.set_save_dir(dir) {
                                continue;
                            }
                        }
                        Control::Stop | Control::Preempt => return Err(failure),
                        Control::Pause | Control::SetLr { .. } | Control::Rewind { .. } => {
                            self.emit(Change::Refused {
                                reason: "training is over; save the weights first (s)".into(),
                            });
                            continue;
                        }
                    }
                    match self.save_all(position, advice) {
                        Ok(()) => {
                            self.emit(Change::Resumed { global_step: self.steps.global_step });
                            return Ok(());
                        }
                        Err(e) => failure = e,
                    }
                }
            }
            SavePolicy::Retry { tries, every } => {
                let advice = |left: u32| {
                    if left == 0 {
                        "giving up; the trained weights are lost, the last checkpoint on disk is kept"
                            .to_owned()
                    } else {
                        format!(
                            "trying again in {} s ({left} tries left; --save-retries)",
                            every.as_secs_f64()
                        )
                    }
                };
                let Err(mut failure) = self.save_all(position, &advice(tries)) else { return Ok(()) };
                for left in (0..tries).rev() {
                    // A stop gives up; another folder is taken; nothing else waits on us.
                    match self.channels.controls.recv_timeout(every) {
                        Ok(Control::Stop | Control::Preempt) => return Err(failure),
                        Ok(Control::SaveTo { dir }) => {
                            self.set_save_dir(dir);
                        }
                        _ => {}
                    }
                    match self.save_all(position, &advice(left)) {
                        Ok(()) => return Ok(()),
                        Err(e) => failure = e,
                    }
                }
                Err(failure)
            }
        }
    }

    /// Writes a checkpoint that continues at `position` into `dir`.
    fn write_checkpoint(&self, dir: &Path, position: (usize, usize)) -> Result<PathBuf, CheckpointError> {
        let path = dir.join(CHECKPOINT_FILE);
        if self.cfg().kit.faults.checkpoint_write {
            return Err(CheckpointError::Write {
                path,
                cause: std::io::Error::other("injected fault (DPT_INJECT_FAULT=checkpoint-write)"),
            });
        }
        self.checkpoint_at(position).write(&path)?;
        Ok(path)
    }

    /// A checkpoint that continues at `position`, its tensors copied to the host.
    pub(super) fn checkpoint_at(&self, position: (usize, usize)) -> Checkpoint {
        let cfg = self.cfg();
        let partial = if position.1 == 0 { Default::default() } else { self.report.epoch.now() };
        let state = CheckpointState {
            epoch: position.0,
            step: position.1,
            global_step: self.steps.global_step,
            lr: self.steps.lr,
            lr_scale: self.steps.plan.scale,
            loss_scaler: self.update.scaler_state(),
            best: (cfg.settings.best.keep > 0 || cfg.settings.best.early_stop.is_some())
                .then(|| self.persist.best.clone()),
            train_samples: self.facts.train_len,
            test_samples: self.facts.test_len,
            partial_epoch: partial,
            epochs_done: self.report.done.epochs,
            train_seconds: self.report.done.tally.seconds,
            samples_done: self.report.done.tally.samples,
            last_test_acc: self.report.done.last_test_acc,
            continued: cfg.kit.resume.as_ref().and_then(|r| r.continued()),
            ..CheckpointState::new(cfg.settings.clone(), cfg.normalization.clone())
        };
        Checkpoint {
            state,
            params: self.update.replicas.params_by_name(),
            optimizer: self.update.replicas.optimizer_by_name(),
            buffers: self.update.replicas.buffers_by_name(),
            ema: self.update.replicas.ema_by_name(),
        }
    }
}
