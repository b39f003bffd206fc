//! The start record as files hold it: this version's (the settings tree embedded) or an earlier
//! one's, which listed some settings as loose fields; those are rebuilt into the tree, and the
//! settings they did not list are the defaults.

use serde::Deserialize;

use super::stats::{Normalization, Restart, RunInfo, WorldInfo};
use crate::engine::optim::loss_scale::LossScaling;
use crate::engine::optim::schedule::Schedule;
use crate::engine::optim::OptimConfig;
use crate::engine::DeviceId;
use crate::model::{ModelKind, Precision};
use crate::settings::{ModelChoice, Settings};

#[derive(Deserialize)]
pub(super) struct RunInfoWire {
    model: ModelKind,
    devices: Vec<DeviceId>,
    param_count: i64,
    steps_per_epoch: usize,
    lr: f64,
    #[serde(default)]
    lr_scale: Option<f64>,
    train_samples: usize,
    test_samples: usize,
    #[serde(default)]
    val_samples: Option<usize>,
    #[serde(default)]
    augment: Option<String>,
    #[serde(default)]
    test_split: Option<String>,
    cpu_threads_per_replica: usize,
    #[serde(default)]
    resumed_at: Option<usize>,
    #[serde(default)]
    started_unix: Option<f64>,
    #[serde(default)]
    allreduce: String,
    #[serde(default)]
    timing: String,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    normalize: Option<Normalization>,
    #[serde(default)]
    restart: Option<Restart>,
    #[serde(default)]
    world: Option<WorldInfo>,
    #[serde(default)]
    settings: Option<Settings>,
    #[serde(flatten)]
    earlier: Earlier,
}

/// The settings an earlier version's start record listed.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Earlier {
    epochs: Option<usize>,
    batch_size: Option<usize>,
    momentum: f64,
    weight_decay: f64,
    optim: Option<OptimConfig>,
    schedule: Option<Schedule>,
    lr_batch_ref: Option<usize>,
    clip_grad_norm: Option<f64>,
    label_smoothing: Option<f64>,
    ema: Option<f64>,
    accumulate: Option<usize>,
    model_file: Option<std::path::PathBuf>,
    seed: Option<u64>,
    precision: Option<Precision>,
    loss_scale: Option<LossScaling>,
}

impl Earlier {
    /// The tree these loose fields stand for.
    fn settings(self, model: ModelKind, lr: f64) -> Settings {
        let mut s = Settings::defaults(model, Default::default());
        if let (ModelKind::Script, Some(file)) = (model, self.model_file) {
            s.model.name = ModelChoice::File(file);
        }
        s.optimizer = self.optim.unwrap_or_else(|| OptimConfig::sgd(lr, self.momentum, self.weight_decay));
        s.schedule = self.schedule.unwrap_or_default();
        let r = &mut s.recipe;
        r.epochs = self.epochs.unwrap_or(r.epochs);
        r.batch_size = self.batch_size.unwrap_or(r.batch_size);
        r.seed = self.seed.unwrap_or(r.seed);
        (r.lr_batch_ref, r.clip_grad_norm, r.ema) = (self.lr_batch_ref, self.clip_grad_norm, self.ema);
        r.label_smoothing = self.label_smoothing.unwrap_or(0.0);
        r.accumulate = self.accumulate.unwrap_or(1);
        s.precision.format = self.precision.unwrap_or(Precision::F32);
        if let Some(l) = self.loss_scale {
            s.precision.scale_loss(l);
        }
        s
    }
}

impl From<RunInfoWire> for RunInfo {
    fn from(w: RunInfoWire) -> RunInfo {
        let settings = match w.settings {
            Some(s) => s,
            None => w.earlier.settings(w.model, w.lr),
        };
        RunInfo {
            model: w.model,
            devices: w.devices,
            param_count: w.param_count,
            steps_per_epoch: w.steps_per_epoch,
            lr: w.lr,
            lr_scale: w.lr_scale,
            train_samples: w.train_samples,
            test_samples: w.test_samples,
            val_samples: w.val_samples,
            augment: w.augment,
            test_split: w.test_split,
            cpu_threads_per_replica: w.cpu_threads_per_replica,
            resumed_at: w.resumed_at,
            started_unix: w.started_unix,
            allreduce: w.allreduce,
            timing: w.timing,
            data: w.data,
            normalize: w.normalize,
            restart: w.restart,
            world: w.world,
            settings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_start_record_keeps_the_settings_it_listed() {
        let json = r#"{"model":"resnet18","devices":["cpu"],"param_count":5,"epochs":4,"steps_per_epoch":3,
            "batch_size":64,"lr":0.05,"momentum":0.9,"weight_decay":0.0,"train_samples":10,"test_samples":5,
            "cpu_threads_per_replica":1,"label_smoothing":0.1,"seed":7,"precision":"bf16"}"#;
        let info: RunInfo = serde_json::from_str(json).expect("reads");
        let s = &info.settings;
        assert_eq!((s.recipe.epochs, s.recipe.batch_size, s.recipe.seed), (4, 64, 7));
        assert_eq!((s.optimizer.lr, s.optimizer.momentum), (0.05, 0.9));
        assert_eq!((s.recipe.label_smoothing, s.precision.format), (0.1, Precision::Bf16));
        let again: RunInfo =
            serde_json::from_str(&serde_json::to_string(&info).expect("writes")).expect("reads");
        assert_eq!(again, info, "this version's record round-trips");
    }
}
