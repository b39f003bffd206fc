//! What a worker and the coordinator say to each other: what a worker starts from, the
//! commands, the replies, the handles on a replica's buffers, and why a worker failed.

use std::sync::Arc;

use tch::Tensor;

use crate::data::Dataset;
use crate::model::script::ScriptModel;
use crate::model::{LossKind, ModelKind, Normalization, Precision, Task};
use dpt_core::tally::Tally;

/// What a replica multiplies its summed loss by before the backward pass: the step's global
/// batch divides it there, so the gradient the replicas sum is the mean over the batch, which
/// the optimizer takes as it is (no division of its own, no gradient written back).
pub enum LossFactor {
    /// `1 / batch` for a step of `batch` samples over every replica: a number the kernel
    /// launch carries (a replica's graph holds it for that batch).
    Mean(usize),
    /// Dynamic loss scaling's `scale / batch`: a 0-dim tensor on the replica's device.
    Scaled(Tensor),
}

impl LossFactor {
    /// The same factor (a tensor's handle, not a copy).
    pub fn shallow_clone(&self) -> LossFactor {
        match self {
            LossFactor::Mean(batch) => LossFactor::Mean(*batch),
            LossFactor::Scaled(factor) => LossFactor::Scaled(factor.shallow_clone()),
        }
    }

    /// `loss` (a sum) times the factor.
    pub fn apply(&self, loss: &Tensor) -> Tensor {
        match self {
            LossFactor::Mean(batch) => loss / (*batch).max(1) as f64,
            LossFactor::Scaled(factor) => loss * factor,
        }
    }
}

/// What a worker needs to start.
pub struct WorkerSetup {
    pub replica: usize,
    pub device: tch::Device,
    pub model: ModelKind,
    pub script: Option<Arc<ScriptModel>>,
    pub loss: LossKind,
    /// What the model is trained to do (a TorchScript model's, found by its check).
    pub task: Task,
    /// The recipe: label smoothing, micro-batches per step, augmentation and its seed.
    pub recipe: crate::settings::Recipe,
    /// Samples per evaluation batch of resident data and token windows ([`Settings::eval_batch`];
    /// streamed data: the loader's, the same).
    ///
    /// [`Settings::eval_batch`]: crate::settings::Settings::eval_batch
    pub eval_batch: usize,
    pub normalization: Normalization,
    pub data: Arc<Dataset>,
    pub initial_params: Tensor,
    pub initial_buffers: Tensor,
    pub threads: usize,
    pub faults: crate::engine::faults::Faults,
    pub channels_last: bool,
    pub precision: Precision,
    /// The streaming loader's decoding, when the data is streamed (else it is resident).
    pub loader: Option<Arc<crate::input::loader::Decoding>>,
    /// With the allreduce overlapping the backward pass: the buckets' byte limits (first,
    /// others); `None`: gradients are reduced after the backward pass.
    pub bucket_bytes: Option<(i64, i64)>,
    /// Under `--zero 2`, the range of the flat gradient this replica keeps the sum of (its
    /// gradient buffer is that long; the backward pass writes bucket buffers of the sink's).
    pub grad_shard: Option<dpt_core::optim::Span>,
    /// On a GPU, the events that order this replica's stream and the coordinator's.
    pub handoff: Option<Arc<crate::engine::handoff::Handoff>>,
}

/// Why a worker failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Forward(#[from] crate::model::ForwardError),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// The shim refused: the device, the TorchScript model, a timing event.
    #[error(transparent)]
    Shim(#[from] dpt_sys::c10d::C10dError),
    #[error("a TorchScript run without its model")]
    NoScript,
    /// `--zero 2` without gradient buckets (the settings refuse it first).
    #[error("--zero 2 needs gradient buckets (--bucket-cap-mb above 0)")]
    ShardWithoutBuckets,
    /// A batch could not be had (the loader, a token window, the epoch's order).
    #[error(transparent)]
    Batch(#[from] crate::input::batches::BatchError),
    #[error("the coordinator is gone")]
    CoordinatorGone,
    /// The window's sums could not be copied off the device.
    #[error(transparent)]
    Read(#[from] crate::device::late_read::LateReadError),
    /// A capture of the replica's step failed (the step runs eagerly).
    #[error("{0}")]
    Capture(String),
    /// A panic inside libtorch or the worker, by its first line.
    #[error("{0}")]
    Panic(String),
    /// The `worker-oom` test fault: the allocator's own words.
    #[error("{}", crate::device::oom::ALLOCATOR_OOM)]
    InjectedOom,
}

/// A command from the coordinator to one worker.
pub enum ToWorker {
    /// A new epoch (0-based): the shuffled order of the training set, uploaded once to the
    /// device (and kept on the host for the augmentation's per-sample draws).
    /// `steps`: the rows `(start, len)` of the order this replica trains on at each of the
    /// epoch's remaining steps, for a streaming loader to read ahead.
    Epoch { order: Arc<Vec<i64>>, epoch: usize, steps: Vec<(usize, usize)> },
    /// Forward and backward on rows `start..start + len` of the epoch order; loss and accuracy
    /// accumulate on the device, without a sync.
    /// `timed`: measure the phases of this step (see `engine::clock`).
    /// `loss_factor`: what the summed loss is multiplied by before the backward pass.
    /// `graph`: whether the step runs eagerly, is captured or replays the replica's graph.
    Step {
        start: usize,
        len: usize,
        global_step: usize,
        dropout_seed: i64,
        timed: bool,
        loss_factor: LossFactor,
        graph: StepGraph,
    },
    /// Read and reset the loss and accuracy accumulators (one device sync).
    Report,
    /// Evaluate rows `start..start + len` of the validation split (`val`) or the test set.
    Evaluate { start: usize, len: usize, val: bool },
    /// Continue `prompt` by `tokens` sampled tokens (none: reply at once), the model seeing at
    /// most `context` tokens, drawn from `seed`.
    Sample { prompt: Arc<Vec<i64>>, tokens: usize, context: usize, seed: i64 },
    /// Leave the thread.
    Shutdown,
}

/// How a replica runs a step's forward and backward passes (`--cuda-graphs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepGraph {
    /// Kernel by kernel.
    Eager,
    /// Captured as the replica's graph for batches of this shard's size, then replayed.
    Capture,
    /// The replica's graph replayed on this step's batch.
    Replay,
}

/// Shallow handles on a worker's flat buffers, given to the coordinator once at start-up. The
/// protocol makes access exclusive: the coordinator touches them only between a worker's
/// `StepDone` and its next `Step`.
pub struct ReplicaHandles {
    pub params: Tensor,
    pub grads: Tensor,
    pub buffers: Tensor,
    pub named_params: Vec<(String, Tensor)>,
    pub named_buffers: Vec<(String, Tensor)>,
    /// The hooks that report the gradient buckets as the backward pass fills them (`None`: the
    /// gradients are reduced after the backward pass); the coordinator re-plans their buckets
    /// once, between steps.
    pub sink: Option<Arc<super::grad_sink::GradSink>>,
}

/// A worker's training figures over a report window: its samples, and its loss and correct
/// sums on their way from the device, read when the window is reported (on a GPU, a window
/// later: no drain).
pub struct WindowSums {
    pub values: crate::device::late_read::LateRead,
    pub samples: f64,
}

impl WindowSums {
    /// The window's tally (its seconds are the coordinator's clock's).
    pub fn read(self, waiting: &crate::device::gpu_wait::Waiting) -> Result<Tally, crate::device::late_read::LateReadError> {
        let [loss, correct] = self.values.read_exactly(waiting)?;
        Ok(Tally { loss, correct, samples: self.samples, seconds: 0.0 })
    }
}

/// A worker's answer to the coordinator.
pub enum FromWorker {
    /// The replica is built and its data resident.
    Ready { replica: usize, handles: Box<ReplicaHandles> },
    /// Gradients of the shard are in the flat gradient buffer (queued, on a GPU); the seconds
    /// of the data and forward/backward phases of a timed step read by now (this step's, or on
    /// a GPU an earlier one's: `engine::clock`); the images that did not decode and were left
    /// out (`path: why`, streamed data only).
    /// `loader`: what taking the step's batch from the streaming loader told.
    /// `flops`: on the replica's first step, the FLOPs of one sample's forward pass, counted
    /// from the operations the model ran (`dpt_sys::c10d::flops`).
    /// `uncaptured`: why the capture this step asked for failed (the step ran eagerly).
    StepDone {
        replica: usize,
        timing: Option<super::clock::Phases>,
        bad: Vec<String>,
        loader: Option<crate::input::loader::LoaderTally>,
        flops: Option<f64>,
        uncaptured: Option<String>,
    },
    /// During a step's backward pass: every gradient of `bucket` is in the flat gradient buffer
    /// (queued, on a GPU), so its allreduce may start.
    BucketReady { replica: usize, bucket: usize },
    /// The accumulated training metrics since the last report.
    Sums { replica: usize, sums: WindowSums },
    /// Test metrics of the assigned rows: loss and top-1 in `sums`, the top-5 hits, and the
    /// confusion counts (row: the label, column: the prediction; `classes` × `classes`).
    Evaluated { replica: usize, sums: Tally, top5: f64, confusion: Vec<f64>, bad: Vec<String> },
    /// The sampled continuation (empty where none was asked for).
    Sampled { replica: usize, tokens: Vec<i64> },
    /// The worker failed and has left.
    Failed { replica: usize, error: WorkerError },
}

impl FromWorker {
    /// The replica that sent this.
    pub fn replica(&self) -> usize {
        match self {
            FromWorker::Ready { replica, .. }
            | FromWorker::StepDone { replica, .. }
            | FromWorker::BucketReady { replica, .. }
            | FromWorker::Sums { replica, .. }
            | FromWorker::Evaluated { replica, .. }
            | FromWorker::Sampled { replica, .. }
            | FromWorker::Failed { replica, .. } => *replica,
        }
    }
}
