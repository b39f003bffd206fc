//! Where a checkpointed run stands besides its tensors: its settings tree as it was resolved,
//! the values the run derived (the input normalization), its position and its running figures.
//! Checkpoints of earlier versions (format 1, settings as loose fields) are read too, their
//! settings rebuilt from what they hold.

use serde::{Deserialize, Serialize};

use crate::model::{ModelKind, Normalization};
use crate::settings::{ModelChoice, Settings};
use dpt_core::augment::{Augment, Preset};
use dpt_core::best::BestKeeper;
use dpt_core::optim::loss_scale::LossScaler;
use dpt_core::optim::schedule::Schedule;
use dpt_core::optim::OptimConfig;
use dpt_core::tally::Tally;

/// The layout this version writes.
const FORMAT: u32 = 2;

/// Where the run stands, besides its tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub format: u32,
    /// The run's settings, as resolved when it (last) started.
    pub settings: Settings,
    /// The input normalization the run trains with, asked for or measured: a continued run
    /// keeps it rather than measuring it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalization>,
    /// The epoch (0-based) and step within it that run next.
    pub epoch: usize,
    pub step: usize,
    pub global_step: usize,
    /// The learning rate in force at the checkpoint.
    pub lr: f64,
    /// The live lr key's scale on the schedule.
    pub lr_scale: f64,
    pub train_samples: usize,
    pub test_samples: usize,
    /// The epoch in progress so far, so a mid-epoch resume reports the whole epoch.
    pub partial_epoch: Tally,
    /// Epochs finished, their total training seconds and samples, for the final summary.
    pub epochs_done: usize,
    pub train_seconds: f64,
    pub samples_done: f64,
    pub last_test_acc: Option<f64>,
    /// The dynamic loss scaler's state, when the run scales its loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scaler: Option<LossScaler>,
    /// The best evaluations so far and the patience count (`best.keep`, `best.early_stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<BestKeeper>,
    /// The continuation (`--resume-lr`, `--skip-batches`) the run was resumed with, and at
    /// which step, carried by every checkpoint written after it: the same command run again (a
    /// requeue, which resumes the run's newer checkpoint) does not apply it a second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued: Option<Continued>,
    /// Read from a checkpoint of an earlier version: its settings are rebuilt from the fields
    /// it had, and those it lacked are the defaults.
    #[serde(skip)]
    pub legacy: bool,
}

/// A continuation applied when resuming from the checkpoint of step `global_step`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Continued {
    pub global_step: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    pub skip: usize,
}

impl CheckpointState {
    /// The checkpointed run's model.
    pub fn model(&self) -> ModelKind {
        self.settings.model_kind()
    }

    /// The state in a checkpoint's `__state__` bytes, of this layout or the one before.
    pub(super) fn from_json(bytes: &[u8]) -> Result<CheckpointState, String> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("bad run state: {e}"))?;
        match value.get("format").and_then(serde_json::Value::as_u64) {
            Some(1) => {
                let old: FormatOne = serde_json::from_value(value).map_err(|e| format!("bad run state: {e}"))?;
                old.try_into()
            }
            Some(2) => serde_json::from_value(value).map_err(|e| format!("bad run state: {e}")),
            other => Err(format!(
                "run state of format {}, which this version ({FORMAT}) cannot read; continue it with the version that wrote it",
                other.map_or_else(|| "unknown".to_owned(), |f| f.to_string())
            )),
        }
    }

    /// The state this version writes (`FORMAT`).
    pub fn new(settings: Settings, normalize: Normalization) -> CheckpointState {
        CheckpointState {
            format: FORMAT,
            settings,
            normalize: Some(normalize),
            epoch: 0,
            step: 0,
            global_step: 0,
            lr: 0.0,
            lr_scale: 1.0,
            train_samples: 0,
            test_samples: 0,
            partial_epoch: Tally::default(),
            epochs_done: 0,
            train_seconds: 0.0,
            samples_done: 0.0,
            last_test_acc: None,
            loss_scaler: None,
            best: None,
            continued: None,
            legacy: false,
        }
    }
}

/// A format-1 run state: the settings it kept as loose fields.
#[derive(Deserialize)]
struct FormatOne {
    model: ModelKind,
    epoch: usize,
    step: usize,
    global_step: usize,
    epochs: usize,
    lr: f64,
    momentum: f64,
    weight_decay: f64,
    batch_size: usize,
    seed: u64,
    train_samples: usize,
    test_samples: usize,
    partial_epoch: Tally,
    epochs_done: usize,
    train_seconds: f64,
    samples_done: f64,
    last_test_acc: Option<f64>,
    #[serde(default)]
    model_file: Option<std::path::PathBuf>,
    #[serde(default)]
    normalize: Option<Normalization>,
    #[serde(default)]
    optim: Option<OptimConfig>,
    #[serde(default)]
    schedule: Option<Schedule>,
    #[serde(default = "one")]
    lr_scale: f64,
    #[serde(default)]
    lr_batch_ref: Option<usize>,
    #[serde(default)]
    clip_grad_norm: Option<f64>,
    #[serde(default)]
    label_smoothing: f64,
    #[serde(default)]
    ema: Option<f64>,
    #[serde(default)]
    augment: Option<Augment>,
    /// Its data settings held the loader and its memory too, now the attempt's placement.
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default)]
    loss_scaler: Option<LossScaler>,
    #[serde(default)]
    best: Option<BestKeeper>,
}

fn one() -> f64 {
    1.0
}

impl TryFrom<FormatOne> for CheckpointState {
    type Error = String;

    fn try_from(old: FormatOne) -> Result<CheckpointState, String> {
        let mut s = Settings::defaults(old.model, Default::default());
        s.model.name = match (old.model, old.model_file) {
            (ModelKind::Script, Some(file)) => ModelChoice::File(file),
            (kind, _) => ModelChoice::Builtin(kind),
        };
        s.optimizer = old.optim.unwrap_or_else(|| OptimConfig::sgd(old.lr, old.momentum, old.weight_decay));
        s.schedule = old.schedule.unwrap_or_default();
        let r = &mut s.recipe;
        (r.epochs, r.batch_size, r.seed) = (old.epochs, old.batch_size, old.seed);
        (r.lr_batch_ref, r.clip_grad_norm, r.label_smoothing, r.ema) =
            (old.lr_batch_ref, old.clip_grad_norm, old.label_smoothing, old.ema);
        if let Some(a) = old.augment {
            r.augment = Some(if a.resized_crop.is_some() { Preset::Imagenet } else { Preset::None });
            r.crop_padding = Some(a.crop_padding.unwrap_or(0));
            r.hflip = Some(a.hflip);
        }
        if let Some(mut data) = old.data {
            if let Some(m) = data.as_object_mut() {
                m.remove("loader");
                m.remove("memory");
            }
            s.data = serde_json::from_value(data).map_err(|e| format!("bad run state: data: {e}"))?;
        }
        if let Some(b) = &old.best {
            (s.best.keep, s.best.metric, s.best.early_stop) = (b.keep, b.metric, b.patience);
        }
        if let Some(scaler) = old.loss_scaler {
            let l = scaler.settings();
            s.precision.loss_scale = Some(true);
            (s.precision.loss_scale_init, s.precision.loss_scale_interval) =
                (Some(l.init), Some(l.growth_interval));
        }
        Ok(CheckpointState {
            format: FORMAT,
            settings: s,
            normalize: old.normalize,
            epoch: old.epoch,
            step: old.step,
            global_step: old.global_step,
            lr: old.lr,
            lr_scale: old.lr_scale,
            train_samples: old.train_samples,
            test_samples: old.test_samples,
            partial_epoch: old.partial_epoch,
            epochs_done: old.epochs_done,
            train_seconds: old.train_seconds,
            samples_done: old.samples_done,
            last_test_acc: old.last_test_acc,
            loss_scaler: old.loss_scaler,
            best: old.best,
            continued: None,
            legacy: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_one_state_keeps_its_settings() {
        let json = r#"{"format":1,"model":"resnet18","epoch":2,"step":5,"global_step":45,"epochs":4,
            "lr":0.05,"momentum":0.9,"weight_decay":0.0005,"batch_size":64,"seed":3,
            "train_samples":1000,"test_samples":100,
            "partial_epoch":{"loss":0.0,"correct":0.0,"samples":0.0,"seconds":0.0},
            "epochs_done":2,"train_seconds":1.5,"samples_done":2000.0,"last_test_acc":0.5,
            "label_smoothing":0.1,"augment":{"crop_padding":4,"hflip":true},
            "data":{"path":"/d","train_limit":1000,"max_bad":0.001,"loader":"stream","memory":1024}}"#;
        let s = CheckpointState::from_json(json.as_bytes()).expect("reads");
        assert!(s.legacy);
        assert_eq!(s.model(), ModelKind::Resnet18);
        assert_eq!((s.settings.optimizer.lr, s.settings.optimizer.momentum), (0.05, 0.9));
        assert_eq!(
            (s.settings.recipe.batch_size, s.settings.recipe.epochs, s.settings.recipe.seed),
            (64, 4, 3)
        );
        assert_eq!(s.settings.recipe.augmentation(), Preset::Cifar.augment());
        assert_eq!(s.settings.data.train_limit, Some(1000));
        assert_eq!((s.global_step, s.epochs_done), (45, 2));
    }

    #[test]
    fn this_layout_round_trips_and_others_are_named() {
        let mut state = CheckpointState::new(Settings::default(), Normalization::uniform(0.5, 0.25));
        state.global_step = 9;
        let bytes = serde_json::to_vec(&state).expect("serializes");
        assert_eq!(CheckpointState::from_json(&bytes), Ok(state));
        let e = CheckpointState::from_json(br#"{"format":3}"#).expect_err("refused");
        assert!(e.contains("format 3"), "{e}");
    }
}
