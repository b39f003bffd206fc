//! Where and when the coordinator writes, and the writing: the save folder, the weights
//! (`model.safetensors`, the moving average's, the user's TorchScript module) and checkpoints,
//! atomically; the periodic checkpoints (their cadence and writer thread: `writer.rs`); the best evaluations
//! kept (`best.keep`, `best.early_stop`); the checkpoints kept on disk that are rewind points.
//! Every method returns the records its writes cause; the loop emits them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tch::Tensor;

use super::asked_save::AskedSave;
use super::snapshot::InFlight;
use super::writer::{keep_newest, Periodic};
use crate::device::gpu_wait::Waiting;
use crate::engine::checkpoint_every::CheckpointEvery;
use crate::engine::EngineError;
use crate::model::script::ScriptModel;
use crate::model::ModelKind;
use crate::persist::checkpoint::{Checkpoint, CheckpointError, CHECKPOINT_FILE};
use crate::persist::resume::Resume;
use crate::persist::{tensor_file, EMA_WEIGHTS_FILE, SCRIPT_FILE, WEIGHTS_FILE};
use crate::record::Change;
use dpt_core::best::{BestKeeper, Decision};

/// Writes named tensors as safetensors at `path`, atomically.
pub fn save_named(tensors: &[(String, Tensor)], path: &Path) -> Result<(), EngineError> {
    tensor_file::write(tensors, path).map_err(|cause| EngineError::Save { path: path.to_owned(), cause })
}

/// Writes the user's TorchScript model with the trained `named` tensors to `path`, atomically.
fn save_script(script: &ScriptModel, named: &[(String, Tensor)], path: &Path) -> Result<(), EngineError> {
    crate::atomic::write_with(path, |tmp| script.export(named, tmp).map_err(std::io::Error::other))
        .map_err(|cause| EngineError::Save { path: path.to_owned(), cause })
}

/// What and how the run saves, from its settings.
pub(super) struct PersistSettings {
    /// `checkpoints.every`: when a periodic checkpoint is due.
    pub(super) every: CheckpointEvery,
    /// `checkpoints.keep`: the step checkpoints kept on disk.
    pub(super) keep: usize,
    /// The model, to read a checkpoint kept on disk back as a rewind point.
    pub(super) model: (ModelKind, Option<Arc<ScriptModel>>),
    /// The checkpoints kept on disk are rewind points (a one-process run: the other ranks of a
    /// multi-process run could not read them).
    pub(super) disk_points: bool,
    /// A test's injected failure of every checkpoint write (`DPT_INJECT_FAULT=checkpoint-write`).
    pub(super) write_fault: bool,
}

/// An evaluation judged: whether it is kept among the best and whether the run stops early.
pub(super) struct Judged {
    epoch: usize,
    value: f64,
    decision: Decision,
}

impl Judged {
    /// The evaluation is one of the best K (a checkpoint of it is wanted).
    pub(super) fn keep(&self) -> bool {
        self.decision.keep
    }

    /// The metric has not improved for the patience.
    pub(super) fn stop(&self) -> bool {
        self.decision.stop
    }
}

pub(super) struct Persistence {
    settings: PersistSettings,
    /// Where weights and checkpoints go (the run directory, unless a save moved it).
    save_dir: Option<PathBuf>,
    /// The periodic checkpoints' cadence and writer thread.
    periodic: Periodic,
    best: BestKeeper,
    /// A save asked for between steps: where the data stands, and whether it waits for the ranks.
    asked: AskedSave,
}

impl Persistence {
    pub(super) fn new(save_dir: Option<PathBuf>, best: BestKeeper, settings: PersistSettings) -> Persistence {
        let periodic = Periodic::new(settings.every, settings.keep);
        Persistence { settings, save_dir, periodic, best, asked: AskedSave::default() }
    }

    /// The save asked for between steps.
    pub(super) fn asked(&mut self) -> &mut AskedSave {
        &mut self.asked
    }

    /// Where weights and checkpoints go (none: the run saves nothing).
    pub(super) fn save_dir(&self) -> Option<&Path> {
        self.save_dir.as_deref()
    }

    /// The run's checkpoint on disk, if one was written.
    pub(super) fn checkpoint_file(&self) -> Option<PathBuf> {
        self.save_dir.as_ref().map(|d| d.join(CHECKPOINT_FILE)).filter(|p| p.is_file())
    }

    /// The failure `DPT_INJECT_FAULT=checkpoint-write` stands for, writing `path`.
    fn injected(&self, path: &Path) -> Option<CheckpointError> {
        self.settings.write_fault.then(|| CheckpointError::Write {
            path: path.to_owned(),
            cause: std::io::Error::other("injected fault (DPT_INJECT_FAULT=checkpoint-write)"),
        })
    }

    /// Saves into `dir` from now on (after a failed save on a full disk); whether it was taken,
    /// and the record that says so.
    pub(super) fn set_save_dir(&mut self, dir: PathBuf) -> (bool, Change) {
        match std::fs::create_dir_all(&dir) {
            Ok(()) => {
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                let message = format!("saving weights and checkpoints into {} from now on", dir.display());
                self.save_dir = Some(dir);
                (true, Change::Warning { message })
            }
            Err(e) => {
                (false, Change::Refused { reason: format!("cannot use {} to save into: {e}", dir.display()) })
            }
        }
    }

    /// Writes the `weights` (and the moving average's, and the TorchScript module with them)
    /// and `checkpoint`; on a failure says what failed and how to retry (`advice`). The caller
    /// has checked that the weights are finite.
    pub(super) fn save_all(
        &mut self,
        weights: &[(String, Tensor)],
        checkpoint: &Checkpoint,
        advice: &str,
    ) -> (Vec<Change>, Result<(), EngineError>) {
        let Some(dir) = self.save_dir.clone() else { return (Vec::new(), Ok(())) };
        let global_step = checkpoint.state.global_step;
        let mut said = Vec::new();
        let saved = |path: &Path| Change::Saved { path: path.display().to_string(), global_step };
        let path = dir.join(WEIGHTS_FILE);
        let result = save_named(weights, &path).and_then(|()| {
            said.push(saved(&path));
            if let Some((p, b)) = &checkpoint.ema {
                let ema_path = dir.join(EMA_WEIGHTS_FILE);
                save_named(
                    &p.iter().chain(b).map(|(n, t)| (n.clone(), t.shallow_clone())).collect::<Vec<_>>(),
                    &ema_path,
                )?;
                said.push(saved(&ema_path));
            }
            if let Some(script) = &self.settings.model.1 {
                let module = dir.join(SCRIPT_FILE);
                save_script(script, weights, &module)?;
                said.push(saved(&module));
            }
            let path = self.write_checkpoint(&dir, checkpoint)?;
            keep_newest(&path, global_step, self.periodic.keep());
            Ok(path)
        });
        match result {
            Ok(path) => {
                said.push(Change::Checkpointed { path: path.display().to_string(), global_step });
                (said, Ok(()))
            }
            Err(e) => {
                let path = match &e {
                    EngineError::Save { path, .. } => path.display().to_string(),
                    _ => dir.display().to_string(),
                };
                let message = crate::root_cause(&e);
                said.push(Change::SaveFailed { path, message, advice: advice.to_owned() });
                (said, Err(e))
            }
        }
    }

    /// Whether a periodic checkpoint is due after the step that made `global_step` steps
    /// (`epoch_end`: the 1-based epoch that step ended) and there is a folder to write it in;
    /// when it is, its clock starts again.
    pub(super) fn checkpoint_due(&mut self, global_step: usize, epoch_end: Option<usize>) -> bool {
        self.save_dir.is_some() && self.cadence_due(global_step, epoch_end)
    }

    /// Whether the periodic checkpoints are due by a clock, which only rank 0's can say.
    pub(super) fn cadence_by_clock(&self) -> bool {
        self.periodic.by_clock()
    }

    /// Whether the cadence alone makes a periodic checkpoint due, whether or not this rank
    /// saves (a rank's part in gathering a checkpoint split over the ranks).
    pub(super) fn cadence_due(&mut self, global_step: usize, epoch_end: Option<usize>) -> bool {
        self.periodic.due(global_step, epoch_end)
    }

    /// Hands the periodic `checkpoint`, on its way to the host, to the checkpoint thread, which
    /// writes it once it has arrived (`waiting` for it); a failure is a warning (the previous
    /// checkpoint is intact).
    pub(super) fn submit(&mut self, checkpoint: InFlight, waiting: Waiting) -> Vec<Change> {
        let Some(dir) = &self.save_dir else { return Vec::new() };
        let path = dir.join(CHECKPOINT_FILE);
        if let Some(e) = self.injected(&path) {
            return vec![Change::Warning { message: crate::error_chain(&e) }];
        }
        self.periodic.submit(checkpoint, path, waiting)
    }

    /// How the checkpoint writes that have ended went; `wait`: first waits for the one in
    /// flight.
    pub(super) fn note_written(&mut self, wait: bool) -> Vec<Change> {
        self.periodic.note_written(wait)
    }

    /// Judges the evaluation of `epoch` (1-based) by the best metric.
    pub(super) fn judge(&mut self, epoch: usize, loss: f64, acc: f64) -> Judged {
        let value = self.best.metric.of(loss, acc);
        Judged { epoch, value, decision: self.best.observe(epoch, value) }
    }

    /// Keeps a judged evaluation among the best K: its `weights` and `checkpoint` in
    /// `best/epoch-E/`, the evicted ones removed; and says an early stop.
    pub(super) fn keep_best(
        &mut self,
        judged: &Judged,
        kept: Option<(&[(String, Tensor)], &Checkpoint)>,
    ) -> Vec<Change> {
        let mut said = Vec::new();
        let (epoch, metric) = (judged.epoch, self.best.metric.name().to_owned());
        if let (Some((weights, checkpoint)), Some(dir)) =
            (kept.filter(|_| judged.keep()), self.save_dir.clone())
        {
            let best = dir.join("best").join(format!("epoch-{epoch}"));
            let saved = std::fs::create_dir_all(&best)
                .map_err(|cause| EngineError::Save { path: best.clone(), cause })
                .and_then(|()| save_named(weights, &best.join(WEIGHTS_FILE)))
                .and_then(|()| self.write_checkpoint(&best, checkpoint).map(drop).map_err(EngineError::from));
            said.push(match saved {
                Ok(()) => Change::BestKept {
                    epoch,
                    metric: metric.clone(),
                    value: judged.value,
                    path: best.display().to_string(),
                },
                Err(e) => Change::Warning { message: crate::error_chain(&e) },
            });
            for old in &judged.decision.evict {
                let _ = std::fs::remove_dir_all(dir.join("best").join(format!("epoch-{old}")));
            }
        }
        if let (true, Some((best_epoch, best)), Some(patience)) =
            (judged.stop(), self.best.best, self.best.patience)
        {
            said.push(Change::EarlyStopped { epoch, best_epoch, metric, best, patience });
        }
        said
    }

    /// The best evaluations kept, for a checkpoint (none when the run keeps none and does not
    /// stop early).
    pub(super) fn best_state(&self) -> Option<BestKeeper> {
        (self.best.keep > 0 || self.best.patience.is_some()).then(|| self.best.clone())
    }

    /// Continues a checkpoint's best evaluations, under this run's settings.
    pub(super) fn restore_best(&mut self, saved: &BestKeeper) {
        let (keep, patience, metric) = (self.best.keep, self.best.patience, self.best.metric);
        self.best = BestKeeper { keep, patience, metric, ..saved.clone() };
    }

    /// The checkpoint kept on disk for step `global_step` (`--keep-checkpoints`), when those
    /// are rewind points.
    fn disk_point(&self, global_step: usize) -> Option<PathBuf> {
        let dir = self.save_dir.as_ref().filter(|_| self.settings.disk_points)?;
        let path = dir.join("checkpoints").join(format!("step-{global_step:09}.safetensors"));
        path.is_file().then_some(path)
    }

    /// The steps of the checkpoints kept on disk that are rewind points.
    pub(super) fn disk_steps(&self) -> Vec<usize> {
        let Some(dir) = self.save_dir.as_ref().filter(|_| self.settings.disk_points) else {
            return Vec::new();
        };
        let names = std::fs::read_dir(dir.join("checkpoints")).into_iter().flatten().flatten();
        names
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("step-")?.strip_suffix(".safetensors")?.parse().ok()
            })
            .collect()
    }

    /// The checkpoint kept on disk for `global_step`, read as a resume reads it.
    pub(super) fn read_disk_point(&self, global_step: usize) -> Result<Option<Resume>, EngineError> {
        let Some(path) = self.disk_point(global_step) else { return Ok(None) };
        let ckpt = Checkpoint::read(&path)?;
        let (model, script) = &self.settings.model;
        Ok(Some(Resume::new(ckpt, *model, script.as_deref(), &path)?))
    }

    /// Writes `checkpoint` into `dir`.
    fn write_checkpoint(&self, dir: &Path, checkpoint: &Checkpoint) -> Result<PathBuf, CheckpointError> {
        let path = dir.join(CHECKPOINT_FILE);
        if let Some(e) = self.injected(&path) {
            return Err(e);
        }
        checkpoint.write(&path)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::checkpoint::CheckpointState;
    use dpt_core::best::BestMetric;

    fn persistence(dir: Option<&Path>, best: BestKeeper, write_fault: bool) -> Persistence {
        let settings = PersistSettings {
            every: CheckpointEvery::Steps(2),
            keep: 0,
            model: (ModelKind::Lenet, None),
            disk_points: true,
            write_fault,
        };
        Persistence::new(dir.map(Path::to_owned), best, settings)
    }

    fn checkpoint(global_step: usize) -> Checkpoint {
        let normalize = crate::model::Normalization::uniform(0.5, 0.5);
        let state = CheckpointState { global_step, ..CheckpointState::new(Default::default(), normalize) };
        Checkpoint {
            state,
            params: vec![("w".into(), Tensor::ones([2], tch::kind::FLOAT_CPU))],
            optimizer: Vec::new(),
            buffers: Vec::new(),
            ema: None,
        }
    }

    #[test]
    fn a_periodic_checkpoint_is_due_by_its_cadence_only_with_a_folder_to_write_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = persistence(Some(dir.path()), BestKeeper::new(BestMetric::ValLoss, 0, None), false);
        assert!(!p.checkpoint_due(3, None));
        assert!(p.checkpoint_due(4, None));
        let mut none = persistence(None, BestKeeper::new(BestMetric::ValLoss, 0, None), false);
        assert!(!none.checkpoint_due(4, None), "nowhere to write");
        let waiting = crate::engine::clock::waiting("a test", "cpu", std::time::Duration::from_secs(1));
        assert!(none.submit(InFlight::at_once(checkpoint(4), true), waiting).is_empty());
    }

    #[test]
    fn the_best_k_are_kept_on_disk_the_evicted_removed_and_an_early_stop_said() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = persistence(Some(dir.path()), BestKeeper::new(BestMetric::ValLoss, 1, Some(1)), false);
        let weights = vec![("w".to_owned(), Tensor::ones([2], tch::kind::FLOAT_CPU))];
        let keep = |p: &mut Persistence, epoch: usize, loss: f64| {
            let judged = p.judge(epoch, loss, 0.0);
            let c = checkpoint(epoch * 10);
            let kept = judged.keep().then_some((weights.as_slice(), &c));
            (judged.keep(), judged.stop(), p.keep_best(&judged, kept))
        };
        let (kept, stop, said) = keep(&mut p, 1, 1.0);
        assert!(kept && !stop);
        assert!(matches!(&said[..], [Change::BestKept { epoch: 1, .. }]), "{said:?}");
        let (kept, _, _) = keep(&mut p, 2, 0.5);
        assert!(kept);
        assert!(dir.path().join("best/epoch-2").join(WEIGHTS_FILE).is_file());
        assert!(!dir.path().join("best/epoch-1").exists(), "evicted from the best 1");
        let (kept, stop, said) = keep(&mut p, 3, 0.9);
        assert!(!kept && stop, "no improvement for the patience of 1");
        assert!(matches!(&said[..], [Change::EarlyStopped { epoch: 3, best_epoch: 2, .. }]), "{said:?}");
        let state = p.best_state().expect("kept: part of a checkpoint");
        let mut resumed =
            persistence(Some(dir.path()), BestKeeper::new(BestMetric::ValLoss, 1, Some(5)), false);
        resumed.restore_best(&state);
        assert_eq!(
            resumed.best_state().map(|b| (b.best, b.patience)),
            Some((Some((2, 0.5)), Some(5))),
            "this run's patience"
        );
    }

    #[test]
    fn a_failed_write_says_what_failed_with_the_advice_and_a_refused_folder_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = persistence(Some(dir.path()), BestKeeper::new(BestMetric::ValLoss, 0, None), true);
        let weights = vec![("w".to_owned(), Tensor::ones([2], tch::kind::FLOAT_CPU))];
        let (said, result) = p.save_all(&weights, &checkpoint(7), "try again");
        assert!(result.is_err());
        assert!(matches!(&said[0], Change::Saved { global_step: 7, .. }), "the weights first: {said:?}");
        assert!(matches!(&said[1], Change::SaveFailed { advice, .. } if advice == "try again"), "{said:?}");
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let (taken, said) = p.set_save_dir(file.join("below"));
        assert!(!taken && matches!(said, Change::Refused { .. }));
        assert_eq!(p.save_dir(), Some(dir.path()), "the folder stays");
    }
}
