//! The run's record: one typed [`Record`] per thing that happened, in order. The engine emits
//! records, the recorder appends them to `metrics.jsonl`, the hub keeps them for viewers, and
//! every reader (dashboard, headless lines, `ls`, `show`, the picture) folds the same records.
//!
//! # `metrics.jsonl`
//!
//! One JSON object per line, tagged by `kind`; each line also carries `time` (RFC 3339, when it
//! was written). Later versions add kinds and fields, never remove these:
//!
//! - `start`: [`RunInfo`] (also after a resume, which then continues the same file)
//! - `step`: [`StepStats`], every `--log-every` steps and at each epoch end
//! - `epoch`: [`EpochStats`]
//! - `event`: a [`Change`], tagged by `event` (`lr_changed`, `paused`, `resumed`,
//!   `stop_requested`, `preempted`, `saved`, `checkpointed`, `restored`, `refused`, `warning`,
//!   `init_from`, `tested`, `best_kept`, `early_stopped`, `save_failed`, `failed`, `sampled`,
//!   `straggler`, `rebucketed`, `snapshot`, `rewound`) with its fields
//! - `summary`: [`Summary`]
//! - `eval`: [`script::EvalStats`], a script run's evaluation at any step
//!
//! A reader skips a line of a `kind` it does not know (a later version's).
//!
//! Records after a `restored` event supersede those of a higher `global_step` before it (see
//! [`history::History`]).

pub mod bottleneck;
pub mod compare;
pub mod curves;
pub mod file;
pub mod history;
pub mod run;
pub mod run_info;
mod run_info_wire;
pub mod schema;
pub mod script;
pub mod smooth;
pub mod stats;
pub mod straggler;
pub mod tensorboard;
pub mod text;

use serde::{Deserialize, Serialize};

pub use run_info::{RunInfo, StateBytes};
pub use stats::{EpochStats, FinishReason, LoaderStats, ReplicaTiming, StepStats, StepTiming, Summary};

/// One entry of the run's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// Workers are ready and training begins.
    Start(Box<RunInfo>),
    /// Statistics of the steps since the previous report.
    Step(Box<StepStats>),
    /// An epoch ended and the test set was evaluated.
    Epoch(Box<EpochStats>),
    /// Something changed or happened during the run.
    Event(Change),
    /// The run ended (completed, stopped or diverged).
    Summary(Box<Summary>),
    /// A script run's evaluation at any step (`run.eval(...)`).
    Eval(Box<script::EvalStats>),
}

/// A change or an incident, recorded as an `event` line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Change {
    /// The learning rate changed at a step boundary.
    LrChanged { from: f64, to: f64, global_step: usize },
    /// Training paused at a step boundary.
    Paused { global_step: usize },
    /// Training resumed.
    Resumed { global_step: usize },
    /// A stop was requested; the run ends after the current step.
    StopRequested { global_step: usize },
    /// The preemption signal arrived (`signal`: its name, on the rank that got it); the run
    /// checkpoints after the current step and exits to be run again.
    Preempted { global_step: usize },
    /// Weights were written.
    Saved { path: String, global_step: usize },
    /// A checkpoint was written.
    Checkpointed { path: String, global_step: usize },
    /// The run continues from a checkpoint at this position (0-based epoch and step).
    Restored { epoch: usize, step: usize, global_step: usize },
    /// A control was refused; nothing changed.
    Refused { reason: String },
    /// A problem that did not stop the run.
    Warning { message: String },
    /// The training loss stopped being finite at `global_step`; the run does what `then` says
    /// (`--on-nan`: goes on, is paused, or stops keeping the last good checkpoint).
    NotFinite { global_step: usize, then: crate::policies::OnNan },
    /// `--init-from` loaded `loaded` tensors from `path`; `missing` are the model's it did not
    /// provide (they keep their own initial values), `unused` the file's the model lacks.
    InitFrom { path: String, loaded: usize, missing: Vec<String>, unused: Vec<String> },
    /// With a validation split: the test set, evaluated once at the end.
    Tested { loss: f64, acc: f64, top5_acc: Option<f64>, samples: usize },
    /// The evaluation of `epoch` is among the `--keep-best` and saved in `path`.
    BestKept { epoch: usize, metric: String, value: f64, path: String },
    /// `--early-stop`: no improvement for `patience` evaluations; the best was at `best_epoch`.
    EarlyStopped { epoch: usize, best_epoch: usize, metric: String, best: f64, patience: usize },
    /// The weights could not be written; they are still in memory. `message` is the root cause
    /// (`No space left on device (os error 28)`), `advice` says how to retry.
    SaveFailed { path: String, message: String, advice: String },
    /// The run failed; `replica` names the failing replica when one did.
    Failed { replica: Option<usize>, device: Option<String>, message: String },
    /// A language model's continuation of the fixed prompt after an evaluation (`--sample-tokens`),
    /// the prompt included, decoded.
    Sampled { global_step: usize, prompt: String, text: String },
    /// A replica's steps (data + forward/backward) ran slower than the replicas' median by
    /// more than `straggler::MARGIN` over a report window; said once per replica and run.
    Straggler { replica: usize, device: String, step_ms: f64, median_ms: f64, global_step: usize },
    /// After the first step, the gradient buckets were planned again in the order the
    /// gradients arrived in (the plan in declared order did not match it): `before` and
    /// `after` buckets.
    Rebucketed { global_step: usize, before: usize, after: usize },
    /// A rewind point was taken before step `global_step`: the state a checkpoint continuing
    /// at 0-based `epoch` and `step` holds, copied to host memory (`--snapshot-every`). `loss`
    /// is the train loss of the last report before it; `unix` when it was taken.
    Snapshot { global_step: usize, epoch: usize, step: usize, loss: Option<f64>, lr: f64, unix: f64 },
    /// The run went back from step `from` to the rewind point at step `to` (at 0-based
    /// `epoch` and `step` of the data), continues with `lr`, and skipped the `skipped`
    /// batches after that point.
    Rewound { from: usize, to: usize, epoch: usize, step: usize, lr: f64, skipped: usize },
}

impl Change {
    /// The step this change happened at, where it has one.
    pub fn global_step(&self) -> Option<usize> {
        match self {
            Change::LrChanged { global_step, .. }
            | Change::Paused { global_step }
            | Change::Resumed { global_step }
            | Change::StopRequested { global_step }
            | Change::Preempted { global_step }
            | Change::Saved { global_step, .. }
            | Change::Checkpointed { global_step, .. }
            | Change::Restored { global_step, .. }
            | Change::Snapshot { global_step, .. } => Some(*global_step),
            Change::Rewound { to, .. } => Some(*to),
            _ => None,
        }
    }
}

impl From<Change> for Record {
    fn from(c: Change) -> Self {
        Record::Event(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_that_is_not_finite_reads_back_as_nan() {
        let step = StepStats { loss: f64::NAN, epoch: 2, ..StepStats::default() };
        let line = serde_json::to_string(&Record::Step(Box::new(step))).unwrap();
        assert!(line.contains(r#""loss":null"#), "{line}");
        let Record::Step(back) = serde_json::from_str::<Record>(&line).unwrap() else { panic!("{line}") };
        assert!(back.loss.is_nan() && back.epoch == 2);
    }

    #[test]
    fn lines_are_tagged_by_kind_and_event() {
        let r = Record::Event(Change::Paused { global_step: 3 });
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "event", "event": "paused", "global_step": 3}));
        assert_eq!(serde_json::from_value::<Record>(v).unwrap(), r);
        let line = r#"{"kind":"event","event":"lr_changed","from":0.2,"to":0.1,"global_step":9,"time":"x"}"#;
        assert_eq!(
            serde_json::from_str::<Record>(line).unwrap(),
            Record::Event(Change::LrChanged { from: 0.2, to: 0.1, global_step: 9 })
        );
        assert!(serde_json::from_str::<Record>(r#"{"kind":"nonsense"}"#).is_err());
    }
}
