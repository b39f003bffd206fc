//! The engine's two interfaces: the event stream out and the control channel in.
//!
//! Events are plain data (no tensors) and derive serde: the headless printer, the metrics
//! recorder and the dashboard consume them alike, and a socket can carry them unchanged.

use serde::{Deserialize, Serialize};

/// A request to the running engine; each takes effect at the next step boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum Control {
    /// Stop dispatching steps until [`Control::Resume`]; workers go idle.
    Pause,
    /// Continue after a pause.
    Resume,
    /// Use this learning rate from the next step on (positive and finite, else refused).
    SetLr { lr: f64 },
    /// Write the current weights into the run directory now.
    SaveNow,
    /// Finish the current step, save the weights and end the run.
    Stop,
}

/// Static facts about a run, sent once when training starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub model: String,
    /// One entry per replica, e.g. `["cuda:0", "cuda:1"]` or `["cpu", "cpu"]`.
    pub devices: Vec<String>,
    pub param_count: i64,
    pub epochs: usize,
    pub steps_per_epoch: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub train_samples: usize,
    pub test_samples: usize,
    /// Intra-op threads each CPU replica uses.
    pub cpu_threads_per_replica: usize,
    /// The global step a resumed run continues from.
    #[serde(default)]
    pub resumed_at: Option<usize>,
    /// Wall-clock start, seconds since the Unix epoch (for the elapsed time of late viewers).
    #[serde(default)]
    pub started_unix: Option<f64>,
}

/// Where a step's time went, in seconds, averaged over the steps of a report window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaTiming {
    pub data: f64,
    pub compute: f64,
}

/// Training statistics over the steps since the previous report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// 1-based epoch.
    pub epoch: usize,
    /// 1-based step within the epoch (the last step of the window).
    pub step: usize,
    pub steps_per_epoch: usize,
    /// Steps done since the run began.
    pub global_step: usize,
    /// Mean training loss per sample over the window.
    pub loss: f64,
    /// Training accuracy over the window.
    pub acc: f64,
    pub lr: f64,
    pub samples_per_sec: f64,
    pub timing: StepTiming,
    pub replicas: Vec<ReplicaTiming>,
}

/// End-of-epoch statistics, with test metrics computed over all replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochStats {
    pub epoch: usize,
    pub train_loss: f64,
    pub train_acc: f64,
    pub test_loss: f64,
    pub test_acc: f64,
    /// Training time of the epoch (evaluation excluded, pauses excluded).
    pub epoch_seconds: f64,
    pub eval_seconds: f64,
    pub samples_per_sec: f64,
    pub lr: f64,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Every epoch ran.
    Completed,
    /// A [`Control::Stop`] arrived.
    Stopped,
    /// The configured step limit was reached.
    StepLimit,
    /// The loss stopped being finite and `--on-nan stop` ended the run.
    Diverged,
}

/// The run's result, as the seed prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub model: String,
    pub devices: Vec<String>,
    /// Test accuracy after the last full epoch, if one finished.
    pub test_acc: Option<f64>,
    pub sec_per_epoch: Option<f64>,
    pub samples_per_sec: f64,
    pub epochs_done: usize,
    pub global_steps: usize,
    pub reason: FinishReason,
}

/// Something the engine reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Workers are ready and training begins.
    Started(Box<RunInfo>),
    /// Statistics of the steps since the previous report.
    Step(Box<StepStats>),
    /// An epoch ended and the test set was evaluated.
    Epoch(Box<EpochStats>),
    /// The learning rate changed at a step boundary.
    LrChanged { from: f64, to: f64, global_step: usize },
    /// Training paused at a step boundary.
    Paused { global_step: usize },
    /// Training resumed.
    Resumed { global_step: usize },
    /// A stop was requested; the run ends after the current step.
    StopRequested { global_step: usize },
    /// Weights were written.
    Saved { path: String, global_step: usize },
    /// A checkpoint was written.
    Checkpointed { path: String, global_step: usize },
    /// The run continues from a checkpoint; `history` holds the events before it.
    Restored {
        epoch: usize,
        step: usize,
        global_step: usize,
        /// Left out of `metrics.jsonl`, which holds the history itself.
        #[serde(default)]
        history: Vec<Event>,
    },
    /// A control was refused; nothing changed.
    Refused { reason: String },
    /// A problem that did not stop the run.
    Warning { message: String },
    /// The run ended normally.
    Finished(Box<Summary>),
    /// The run failed; `replica` names the failing replica when one did.
    Failed { replica: Option<usize>, device: Option<String>, message: String },
}
