//! The figures a run reports: its settings at start, each report window, each epoch and the
//! final summary. Plain data, no tensors.

use serde::{Deserialize, Serialize};

use crate::device::DeviceId;
use crate::model::ModelKind;

/// A number JSON wrote as `null` (it has no NaN or infinity) read back as NaN, so that the
/// record of a loss that stopped being finite reaches viewers and readers.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
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
    /// The mean gradient's global L2 norm before clipping: averaged over the window's steps
    /// with `--clip-grad-norm` (which takes it every step), else the window's last step's (a
    /// norm per step would cost launches the step has no use for).
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
