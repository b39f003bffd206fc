//! The start record's type: the facts a run records once when training starts (again after a
//! resume), and the parts they hold (the restart, the processes, one replica's memory). Its file
//! form, which documents each field, is `run_info_wire.rs`.

use serde::{Deserialize, Serialize};

use crate::device::DeviceId;
use crate::model::{ModelKind, Normalization};
use crate::settings::Settings;

/// Static facts about a run, recorded once when training starts (again after a resume): its
/// settings tree as resolved, and what the run found or decided at start. Each field is the
/// start record's of the same name, whose meaning its file form documents (`run_info_wire.rs`,
/// whence the reference's records page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(from = "super::run_info_wire::RunInfoWire", into = "super::run_info_wire::RunInfoWire")]
pub struct RunInfo {
    pub model: ModelKind,
    pub task: crate::model::Task,
    pub devices: Vec<DeviceId>,
    pub param_count: i64,
    pub steps_per_epoch: usize,
    pub lr: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_scale: Option<f64>,
    pub train_samples: usize,
    pub test_samples: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_samples: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub augment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_split: Option<String>,
    pub cpu_threads_per_replica: usize,
    #[serde(default)]
    pub resumed_at: Option<usize>,
    #[serde(default)]
    pub started_unix: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<StateBytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_bandwidth: Option<super::bottleneck::MeasuredBus>,
    #[serde(default)]
    pub allreduce: String,
    #[serde(default)]
    pub timing: String,
    #[serde(default)]
    pub math: String,
    pub cuda_graphs: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<super::script::ScriptInfo>,
    pub settings: Settings,
}

impl Default for RunInfo {
    /// The default model's run on no device, before anything is known.
    fn default() -> Self {
        RunInfo {
            model: ModelKind::Lenet,
            task: crate::model::Task::Classify,
            devices: Vec::new(),
            param_count: 0,
            steps_per_epoch: 0,
            lr: Settings::default().optimizer.lr,
            lr_scale: None,
            train_samples: 0,
            test_samples: 0,
            val_samples: None,
            augment: None,
            test_split: None,
            cpu_threads_per_replica: 1,
            resumed_at: None,
            started_unix: None,
            snapshot_bytes: None,
            checkpoint_bytes: None,
            memory: None,
            bus_bandwidth: None,
            allreduce: String::new(),
            timing: String::new(),
            math: String::new(),
            cuda_graphs: String::new(),
            data: None,
            normalize: None,
            restart: None,
            world: None,
            script: None,
            settings: Settings::default(),
        }
    }
}

/// The same command run again on a run directory that holds the run: by torchrun's restarts,
/// Slurm's requeue, or a person or script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Restart {
    /// `torchrun`, `slurm` or `the same command`.
    pub by: String,
    /// `TORCHELASTIC_RESTART_COUNT` or `SLURM_RESTART_COUNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

impl RunInfo {
    /// Whether a viewer may ask the run for `capability` (a native run takes every control).
    pub fn can(&self, capability: super::script::Capability) -> bool {
        self.script.as_ref().is_none_or(|s| s.can(capability))
    }

    /// The metric the run judges its evaluations by: its `--best-metric`, the loss for a run
    /// without classes (as the run itself judges).
    pub fn judged_metric(&self) -> crate::best::BestMetric {
        self.settings.best.metric.judged(self.task.has_classes())
    }

    /// Epochs the run trains.
    pub fn epochs(&self) -> usize {
        self.settings.recipe.epochs
    }

    /// Whether the run's loss has a perplexity: a language model on token data (a regression's
    /// or a segmentation's loss is reported as it is).
    pub fn has_perplexity(&self) -> bool {
        !self.task.has_classes() && self.settings.data.block_size.is_some()
    }

    /// The learning rate in words: the rate, its scaling with the batch and its schedule
    /// (`lr 0.2 (0.1 × batch 512 / 256), cosine, 100 warm-up steps, min lr 0`).
    pub fn lr_label(&self) -> String {
        let s = &self.settings;
        let tuned = s.optimizer.lr;
        let mut label = match s.recipe.lr_batch_ref {
            Some(r) => format!("lr {} ({tuned} × batch {} / {r})", s.base_lr(), s.recipe.batch_size),
            None => format!("lr {tuned}"),
        };
        if s.schedule != Default::default() {
            label += &format!(", {}", s.schedule.describe());
        }
        label
    }

    /// The optimizer in words, with the per-step options.
    pub fn optimizer_label(&self) -> String {
        let (s, r) = (&self.settings, &self.settings.recipe);
        let mut label = s.optimizer.describe();
        if let Some(c) = r.clip_grad_norm {
            label += &format!(", gradient norm clipped at {c}");
        }
        if r.label_smoothing > 0.0 {
            label += &format!(", label smoothing {}", r.label_smoothing);
        }
        if let Some(d) = r.ema {
            label += &format!(", weights' EMA {d}");
        }
        if r.accumulate > 1 {
            label += &format!(", {} micro-batches per step", r.accumulate);
        }
        if let Some(l) = s.precision.loss_scaling() {
            label += &format!(", {}", l.describe());
        }
        label
    }

    /// The model as screens and pictures name it: the built-in's name, or the TorchScript
    /// file's name.
    pub fn model_label(&self) -> String {
        if let Some(script) = &self.script {
            return script.label.clone();
        }
        match self.settings.model.name.file() {
            Some(file) => file
                .file_name()
                .map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned()),
            None => self.model.name().to_owned(),
        }
    }
}

/// The processes of a multi-process run, as rank 0 records them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorldInfo {
    /// This process's rank.
    pub rank: usize,
    /// `gloo` or `nccl`.
    pub backend: String,
    /// Host of each rank.
    pub hosts: Vec<String>,
    /// Replicas of each rank; the step records time them all, numbered rank by rank.
    pub replicas: Vec<usize>,
    /// Each rank's devices, one per replica.
    #[serde(default)]
    pub devices: Vec<Vec<crate::device::DeviceId>>,
}

/// The bytes one replica holds for the whole run: its weights, its gradient sums and its
/// optimizer state (under `--zero 1`, its shard of the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StateBytes {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    /// The replicas the optimizer state is split over (1: each holds all of it).
    pub optimizer_shards: usize,
    /// The replicas the gradient sums are split over (`--zero 2`; 1: each holds all of them;
    /// records written before stage 2 have none).
    #[serde(default = "one_shard")]
    pub gradient_shards: usize,
    /// Under `--zero 2`, the most bytes of bucket buffers the replica holds at once during a
    /// step (its backward pass writes each bucket's gradients there until the bucket is
    /// reduced); 0 otherwise, and in records written before it was said.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bucket_buffers: u64,
}

fn one_shard() -> usize {
    1
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
