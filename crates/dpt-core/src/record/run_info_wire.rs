//! The start record as files hold it. This version writes the settings tree (`settings`) and,
//! for readers of earlier versions' records, the loose fields those listed (`epochs`, `optim`,
//! `label_smoothing`, …), derived from the tree here and nowhere else: the record's schema
//! only grows. An earlier version's record, without the tree, has it rebuilt from those fields
//! (the settings they did not list are the defaults).

use serde::{Deserialize, Serialize};

use super::run_info::{Restart, RunInfo, WorldInfo};
use crate::device::DeviceId;
use crate::model::Normalization;
use crate::model::{ModelKind, Precision};
use crate::optim::loss_scale::LossScaling;
use crate::optim::schedule::Schedule;
use crate::optim::OptimConfig;
use crate::settings::{ModelChoice, Settings};

/// The start record's fields, documented here once: [`RunInfo`] holds the same, by name.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct RunInfoWire {
    model: ModelKind,
    /// What the model is trained to do: runs without classes report no accuracy. Absent in the
    /// records of versions before language models: they classified.
    #[serde(default)]
    task: crate::model::Task,
    /// One entry per replica, e.g. `["cuda:0", "cuda:1"]` or `["cpu", "cpu"]`.
    devices: Vec<DeviceId>,
    param_count: i64,
    steps_per_epoch: usize,
    /// The learning rate in force when the run (re)started.
    lr: f64,
    /// The live lr key's scale on the schedule when the run (re)started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lr_scale: Option<f64>,
    train_samples: usize,
    test_samples: usize,
    /// The validation split's samples (`--val-fraction`): the epochs' test figures are then
    /// its, and the test set is evaluated once at the end (a `tested` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    val_samples: Option<usize>,
    /// Training-time augmentation in words (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    augment: Option<String>,
    /// `val` when the test figures are the data set's own `val/` folder's (it has no `test/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    test_split: Option<String>,
    /// Intra-op threads each CPU replica uses.
    cpu_threads_per_replica: usize,
    /// The global step a resumed run continues from.
    #[serde(default)]
    resumed_at: Option<usize>,
    /// Wall-clock start, seconds since the Unix epoch (for the elapsed time of late viewers).
    #[serde(default)]
    started_unix: Option<f64>,
    /// Host memory the rewind points take when all `--snapshots` are kept (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_bytes: Option<u64>,
    /// Host memory a periodic checkpoint's copy takes while its thread writes it (absent: no
    /// periodic checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint_bytes: Option<u64>,
    /// What one replica holds for the whole run, by part (absent in runs recorded before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<super::run_info::StateBytes>,
    /// The allreduce bus bandwidth `dpt-tui doctor` measured across this run's GPUs, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bus_bandwidth: Option<super::bottleneck::MeasuredBus>,
    /// How this process sums its replicas' gradients (`nccl over 2 GPUs`, `copies through
    /// cpu`), and across processes (`+ gloo across 2 ranks`).
    #[serde(default)]
    allreduce: String,
    /// What the step timings were measured with (`host clock, every step`, `CUDA events, one
    /// step in 10`).
    #[serde(default)]
    timing: String,
    /// What the products compute in (`bf16 autocast, f32 weights and update`, `f32 with TF32
    /// matrix products and convolutions`); empty in records of earlier versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    math: String,
    /// Whether the replicas capture their steps as CUDA graphs and replay them (`graphed: …`),
    /// or why they run them kernel by kernel (`eager: a replica trains on the CPU`,
    /// `eager: --cuda-graphs off`, …); empty in records of earlier versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    cuda_graphs: String,
    /// The data set: what was loaded, the image shape and the classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
    /// The input normalization, `(x - mean) / std` per channel on the `[0, 1]` scale: what a
    /// user applies to use the trained model elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    normalize: Option<Normalization>,
    /// Why this attempt of the run continues an earlier one (absent: a start, or `--resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restart: Option<Restart>,
    /// The processes of a multi-process run (absent for one process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    world: Option<WorldInfo>,
    /// A run of the user's own script (`dpt-tui run -- CMD`): its label, controls and devices.
    /// Its `settings` are then the defaults and say nothing of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    script: Option<super::script::ScriptInfo>,
    /// The run's settings, as resolved (records of earlier versions: rebuilt from the settings
    /// they listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settings: Option<Settings>,
    #[serde(flatten)]
    earlier: Earlier,
}

/// The settings earlier versions' start records listed as loose fields.
#[derive(Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub(super) struct Earlier {
    epochs: Option<usize>,
    batch_size: Option<usize>,
    momentum: f64,
    weight_decay: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    optim: Option<OptimConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schedule: Option<Schedule>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lr_batch_ref: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clip_grad_norm: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label_smoothing: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ema: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    accumulate: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_file: Option<std::path::PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    precision: Option<Precision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loss_scale: Option<LossScaling>,
}

impl From<&Settings> for Earlier {
    /// The loose fields of `s`, as earlier versions wrote them.
    fn from(s: &Settings) -> Earlier {
        let r = &s.recipe;
        Earlier {
            epochs: Some(r.epochs),
            batch_size: Some(r.batch_size),
            momentum: s.optimizer.momentum,
            weight_decay: s.optimizer.weight_decay,
            optim: Some(s.optimizer),
            schedule: Some(s.schedule.clone()),
            lr_batch_ref: r.lr_batch_ref,
            clip_grad_norm: r.clip_grad_norm,
            label_smoothing: (r.label_smoothing > 0.0).then_some(r.label_smoothing),
            ema: r.ema,
            accumulate: (r.accumulate > 1).then_some(r.accumulate),
            model_file: s.model.name.file().map(Into::into),
            seed: Some(r.seed),
            precision: Some(s.precision.format),
            loss_scale: s.precision.loss_scaling(),
        }
    }
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

impl From<RunInfo> for RunInfoWire {
    fn from(i: RunInfo) -> RunInfoWire {
        RunInfoWire {
            earlier: Earlier::from(&i.settings),
            model: i.model,
            task: i.task,
            devices: i.devices,
            param_count: i.param_count,
            steps_per_epoch: i.steps_per_epoch,
            lr: i.lr,
            lr_scale: i.lr_scale,
            train_samples: i.train_samples,
            test_samples: i.test_samples,
            val_samples: i.val_samples,
            augment: i.augment,
            test_split: i.test_split,
            cpu_threads_per_replica: i.cpu_threads_per_replica,
            resumed_at: i.resumed_at,
            started_unix: i.started_unix,
            snapshot_bytes: i.snapshot_bytes,
            checkpoint_bytes: i.checkpoint_bytes,
            memory: i.memory,
            bus_bandwidth: i.bus_bandwidth,
            allreduce: i.allreduce,
            timing: i.timing,
            math: i.math,
            cuda_graphs: i.cuda_graphs,
            data: i.data,
            normalize: i.normalize,
            restart: i.restart,
            world: i.world,
            script: i.script,
            settings: Some(i.settings),
        }
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
            task: w.task,
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
            snapshot_bytes: w.snapshot_bytes,
            checkpoint_bytes: w.checkpoint_bytes,
            memory: w.memory,
            bus_bandwidth: w.bus_bandwidth,
            allreduce: w.allreduce,
            timing: w.timing,
            math: w.math,
            cuda_graphs: w.cuda_graphs,
            data: w.data,
            normalize: w.normalize,
            restart: w.restart,
            world: w.world,
            script: w.script,
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
