//! The engine's control channel: requests in, applied at step boundaries. What the engine
//! reports goes out as [`crate::record::Record`]s.

use std::path::PathBuf;

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
    /// Write the weights and a checkpoint into the run directory now (also retries a failed
    /// save).
    SaveNow,
    /// Save the weights and checkpoints into this folder from now on, starting now (the way out
    /// when the run directory's disk is full).
    SaveTo { dir: PathBuf },
    /// Finish the current step, save the weights and end the run.
    Stop,
    /// The job is being preempted: stop as [`Control::Stop`] does, on every rank, and end the
    /// run as preempted (the process then exits with the requeue status).
    Preempt,
    /// Go back to the rewind point taken before step `global_step`, continue with `lr` (absent:
    /// the rate the schedule has there) and, with `skip`, past the batches trained on since.
    Rewind { global_step: usize, lr: Option<f64>, skip: bool },
    /// A viewer's rewind dialog opened (`on`) or closed: while any viewer holds the run it waits
    /// at the step boundary as paused, so the points the dialog lists stay the points kept.
    Hold { on: bool },
}
