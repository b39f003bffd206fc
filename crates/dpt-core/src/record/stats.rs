//! The figures a run reports: its settings at start, each report window, each epoch and the
//! final summary. Plain data, no tensors.

use serde::{Deserialize, Serialize};

use crate::device::DeviceId;
use crate::model::ModelKind;
use crate::settings::Settings;

/// A number JSON wrote as `null` (it has no NaN or infinity) read back as NaN, so that the
/// record of a loss that stopped being finite reaches viewers and readers.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

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

pub use crate::model::Normalization;

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

/// Where a step's time went, in seconds, averaged over the steps of a report window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepTiming {
    /// Gathering and normalizing the batch on the device (slowest replica).
    pub data: f64,
    /// Forward and backward pass (slowest replica).
    pub compute: f64,
    /// Summing the gradients over the replicas and handing the sum back.
    pub allreduce: f64,
    /// The SGD update of every replica and the BatchNorm statistics broadcast.
    pub update: f64,
}

impl StepTiming {
    /// Total step time.
    pub fn total(&self) -> f64 {
        self.data + self.compute + self.allreduce + self.update
    }
}

/// One replica's share of the work in a report window (seconds per step, averaged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplicaTiming {
    pub data: f64,
    pub compute: f64,
}

/// Training statistics over the steps since the previous report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepStats {
    /// 1-based epoch.
    pub epoch: usize,
    /// 1-based step within the epoch (the last step of the window).
    pub step: usize,
    pub steps_per_epoch: usize,
    /// Steps done since the run began.
    pub global_step: usize,
    /// Mean training loss per sample over the window (NaN when not finite: written `null`).
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    /// Training accuracy over the window (NaN, written `null`, for a script run that reported
    /// none).
    #[serde(deserialize_with = "nan_if_null")]
    pub acc: f64,
    pub lr: f64,
    pub samples_per_sec: f64,
    pub timing: StepTiming,
    pub replicas: Vec<ReplicaTiming>,
    /// The mean gradient's global L2 norm, averaged over the window's steps (before clipping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    /// The dynamic loss scale at the window's end (`--loss-scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// The window's steps skipped because their scaled gradient overflowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_steps: Option<usize>,
    /// How many of the window's steps were timed (none in a window of warm-up steps, whose
    /// timings are then zeros to be ignored); absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_steps: Option<usize>,
    /// The streaming loader over the window (streamed data only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader: Option<LoaderStats>,
    /// The share of this process's gradient buckets, the last left out, whose reduction started
    /// while a backward pass of the step was still running (bucketed reduction of two buckets
    /// or more; `--bucket-cap-mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlapped: Option<f64>,
    /// What limits the window's steps, and what to change (absent for a window of warm-up
    /// steps, and in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<super::bottleneck::Bottleneck>,
    /// The model FLOP/s the window's throughput achieves (three forward passes per sample;
    /// `flops.rs`), once the model's FLOPs are counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_flops: Option<f64>,
    /// `model_flops` as a share of the devices' peak in the run's precision (GPUs in the peak
    /// table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// With `DPT_SYNC_DEBUG=1`, the synchronizing CUDA calls per step over the window (c10's
    /// sync debug mode's warnings, counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_syncs: Option<f64>,
    /// A script run's named figures at the window's last step (`run.step(..., name=value)`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub scalars: std::collections::BTreeMap<String, f64>,
}

/// How the streaming loader kept up over a window: whether batches were ready when the
/// replicas asked, and how fast its threads decode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoaderStats {
    /// Batches ready in a replica's queue when it asked for the next, on average (0: the
    /// replica waited for its loader).
    pub ready: f64,
    /// The queue's depth (`--prefetch`, as the memory budget allows).
    pub depth: usize,
    /// Images decoded per second of a loader's time decoding, over the window.
    pub images_per_sec: f64,
    /// The process's decode threads, shared by its replicas' loaders (absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
}

/// End-of-epoch statistics, with test metrics computed over all replicas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EpochStats {
    pub epoch: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub train_loss: f64,
    pub train_acc: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub test_loss: f64,
    pub test_acc: f64,
    /// Training time of the epoch (evaluation excluded, pauses excluded).
    pub epoch_seconds: f64,
    pub eval_seconds: f64,
    pub samples_per_sec: f64,
    pub lr: f64,
    /// The test figures of the weights' moving average (`--ema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ema_test_acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ema_test_loss: Option<f64>,
    /// The share of test samples whose label is among the model's 5 highest outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top5_acc: Option<f64>,
    /// Each class's test accuracy (`null` for a class without samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_class_acc: Option<Vec<Option<f64>>>,
    /// Test counts by label (rows) and prediction (columns), up to [`CONFUSION_MAX_CLASSES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confusion: Option<Vec<Vec<u64>>>,
}

/// The most classes whose confusion counts an epoch record holds (a line of the record stays
/// small; per-class accuracy is recorded for any count).
pub const CONFUSION_MAX_CLASSES: usize = 100;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Every epoch ran.
    Completed,
    /// A stop was asked for (the dashboard, a signal).
    Stopped,
    /// The configured step limit was reached.
    StepLimit,
    /// The loss stopped being finite and `--on-nan stop` ended the run.
    Diverged,
    /// `--early-stop`: the metric stopped improving.
    EarlyStopped,
    /// The preemption signal arrived (on any rank): checkpointed, to be run again.
    Preempted,
}

/// The run's result, as the seed prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub model: ModelKind,
    pub devices: Vec<DeviceId>,
    /// Test accuracy after the last full epoch, if one finished.
    pub test_acc: Option<f64>,
    /// With a validation split: its last accuracy (`test_acc` is then the test set's, at the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_acc: Option<f64>,
    pub sec_per_epoch: Option<f64>,
    pub samples_per_sec: f64,
    pub epochs_done: usize,
    pub global_steps: usize,
    pub reason: FinishReason,
    /// The most resident host memory the process held, in MiB (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    /// A run without classes: its last evaluated loss, and that loss's perplexity (`exp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// Token data: `samples_per_sec` × the block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_sec: Option<f64>,
    /// What limited the run's steps over all its timed steps, and what to change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<super::bottleneck::Bottleneck>,
    /// FLOPs of one sample's forward pass, counted from the model's own operations on its
    /// first step (matrix products, convolutions, attention; `flops.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_per_sample: Option<f64>,
    /// The model FLOP/s of the run's throughput (`samples_per_sec` x 3 x `flops_per_sample`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_flops: Option<f64>,
    /// `model_flops` as a share of `peak_flops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// What the run's GPUs can do at most in its precision (GPUs in the peak table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_flops: Option<crate::flops::PeakFlops>,
    /// The most memory the CUDA caching allocator held allocated at once on each of the
    /// process's GPUs, in MiB (what `torch.cuda.max_memory_allocated` reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peak_device_mib: Vec<f64>,
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
