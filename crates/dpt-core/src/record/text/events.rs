//! An event record (`Change`) as a line of text: what changed or happened, at which step, and
//! how much it matters.

use super::{lr_text, Level, Line};
use crate::policies::OnNan;
use crate::record::Change;

/// The line of event `c`.
pub(super) fn change_line(c: &Change) -> Line {
    let (level, text) = match c {
        Change::LrChanged { from, to, global_step } => {
            (Level::Info, format!("lr {} -> {} at step {global_step}", lr_text(*from), lr_text(*to)))
        }
        Change::Paused { global_step } => (Level::Info, format!("paused at step {global_step}")),
        Change::Resumed { global_step } => (Level::Info, format!("resumed at step {global_step}")),
        Change::StopRequested { global_step } => (Level::Info, format!("stopping after step {global_step}")),
        Change::Preempted { global_step } => (
            Level::Warn,
            format!("preempted: checkpointing after step {global_step}; the same command continues the run"),
        ),
        Change::Saved { path, global_step } => {
            (Level::Info, format!("saved weights at step {global_step} to {path}"))
        }
        Change::Checkpointed { path, global_step } => {
            (Level::Info, format!("checkpoint written at step {global_step} ({path})"))
        }
        Change::Restored { epoch, step, global_step } => (
            Level::Info,
            format!(
                "resumed from the checkpoint at epoch {} step {step} (step {global_step} in all)",
                epoch + 1
            ),
        ),
        Change::Refused { reason } => (Level::Warn, format!("refused: {reason}")),
        Change::Warning { message } => (Level::Warn, format!("warning: {message}")),
        Change::NotFinite { global_step, then } => {
            let then = match then {
                OnNan::Ignore => " (--on-nan ignore)",
                OnNan::Pause => {
                    ": paused; the last good checkpoint is in the run directory (--resume it, with a lower --lr)"
                }
                OnNan::Stop => ": stopping; the last good checkpoint is kept",
            };
            (Level::Warn, format!("warning: the loss is not finite at step {global_step}{then}"))
        }
        Change::Tested { loss, acc, top5_acc, samples } => (
            Level::Info,
            format!(
                "test set ({samples} samples, kept out of training and model choice): loss {loss:.4}, acc {acc:.3}{}",
                top5_acc.map_or(String::new(), |a| format!(", top-5 {a:.3}"))
            ),
        ),
        Change::BestKept { epoch, metric, value, path } => {
            (Level::Info, format!("epoch {epoch} is among the best ({metric} {value:.4}): kept in {path}"))
        }
        Change::EarlyStopped { epoch, best_epoch, metric, best, patience } => (
            Level::Warn,
            format!("early stop after epoch {epoch}: {metric} has not improved for {patience} evaluation(s); the best, {best:.4}, was at epoch {best_epoch}"),
        ),
        Change::InitFrom { path, loaded, missing, unused } => {
            let mut line = format!("started from {path}: {loaded} tensor(s) loaded");
            if !missing.is_empty() {
                line += &format!("; kept the model's own initial values for {}", missing.join(", "));
            }
            if !unused.is_empty() {
                line += &format!("; not in the model: {}", unused.join(", "));
            }
            let level = if missing.is_empty() && unused.is_empty() { Level::Info } else { Level::Warn };
            (level, line)
        }
        Change::SaveFailed { path, message, advice } => {
            (Level::Error, format!("cannot save {path}: {message}; the weights are kept in memory; {advice}"))
        }
        Change::Failed { message, .. } => (Level::Error, format!("training failed: {message}")),
        Change::Sampled { global_step, prompt, text } => {
            (Level::Info, format!("sample at step {global_step}: {prompt:?} → {text:?}"))
        }
        Change::Straggler { replica, device, step_ms, median_ms, global_step } => (
            Level::Warn,
            format!(
                "straggler: replica {replica} ({device}) takes {step_ms:.1} ms per step against the median {median_ms:.1} ms (+{:.0}%) at step {global_step}",
                100.0 * (step_ms / median_ms - 1.0)
            ),
        ),
        Change::Rebucketed { global_step, before, after } => (
            Level::Info,
            format!(
                "gradient buckets re-planned in the order the first step made the gradients: {after} bucket(s), {before} before, from step {global_step}"
            ),
        ),
        Change::Snapshot { global_step, .. } => (Level::Info, format!("rewind point at step {global_step}")),
        Change::Rewound { from, to, lr, skipped, .. } => (
            Level::Warn,
            format!("rewound from step {from} to step {to}: lr {}, {skipped} batch(es) skipped", lr_text(*lr)),
        ),
    };
    Line { level, text, progress: false }
}
