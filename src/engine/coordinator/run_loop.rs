//! The training loop proper: epochs of steps from a position of the data, until the run ends
//! or a rewind sends it back (the coordinator then starts it again from the rewind point).

use std::sync::Arc;

use super::rewind::Plan;
use super::Coordinator;
use crate::engine::tally::{Tally, Window};
use crate::engine::worker::ToWorker;
use crate::engine::EngineError;
use crate::input::shard::{epoch_order, replica_rows, step_rows};
use crate::record::FinishReason;

/// How a run of the loop ended.
pub(super) enum Leg {
    /// The run is over, for `reason`, the data at `position` (what would train next).
    Ended { reason: FinishReason, position: (usize, usize) },
    /// Go back to a rewind point; `now` is what would have trained next.
    Rewind { plan: Plan, now: (usize, usize) },
}

impl Coordinator {
    /// Whether the run has done all it was asked to with the data at `position`: its steps
    /// (a run measured in steps, which a skip may carry past its planned periods), else its
    /// epochs.
    pub(super) fn finished(&self, position: (usize, usize)) -> bool {
        match self.cfg().settings.recipe.steps {
            Some(n) => self.steps.global_step >= n,
            None => position.0 >= self.cfg().settings.recipe.epochs,
        }
    }

    /// Trains from `start` (0-based epoch and step of the data), the epoch's figures so far
    /// `partial`.
    pub(super) fn epochs_from(&mut self, start: (usize, usize), partial: Tally) -> Result<Leg, EngineError> {
        let k = self.replica_span().1;
        let steps_per_epoch = self.cfg().steps_per_epoch(self.facts.train_len);
        let mut position = start;
        let mut epoch = start.0;
        while !self.finished((epoch, 0)) {
            let order = Arc::new(epoch_order(self.cfg().settings.recipe.seed, epoch, self.facts.train_len));
            let first = if epoch == start.0 { start.1 } else { 0 };
            let (offset, total) = self.replica_span();
            let rows = (self.cfg().settings.recipe.batch_size, self.facts.train_len);
            self.pool.broadcast(|i| ToWorker::Epoch {
                order: Arc::clone(&order),
                epoch,
                steps: replica_rows(first, steps_per_epoch, rows, (offset + i, total)),
            })?;
            self.report.epoch = if epoch == start.0 { Window::resuming(k, partial) } else { Window::new(k) };
            self.report.window = Window::new(k);
            for step in first..steps_per_epoch {
                position = (epoch, step);
                self.data_at = position;
                self.poll_controls(position)?;
                if let Some(plan) = self.points.pending.take() {
                    return Ok(Leg::Rewind { plan, now: position });
                }
                if let Some(reason) = self.flow.stopping() {
                    return Ok(Leg::Ended { reason, position });
                }
                if self.cfg().settings.placement.max_steps.is_some_and(|m| self.steps.global_step >= m) {
                    return Ok(Leg::Ended { reason: FinishReason::StepLimit, position });
                }
                if self.points.due {
                    self.take_point(position);
                }
                let (start, len) =
                    step_rows(step, self.cfg().settings.recipe.batch_size, self.facts.train_len);
                self.train_step(start, len)?;
                let run_done = self.cfg().settings.recipe.steps.is_some_and(|n| self.steps.global_step >= n);
                let last = step + 1 == steps_per_epoch || run_done;
                if last || (step + 1) % self.cfg().settings.placement.log_every == 0 {
                    self.report(epoch + 1, step + 1, steps_per_epoch)?;
                }
                self.note_written(false);
                self.checkpoint_if_due(
                    None,
                    ((step + 1) / steps_per_epoch + epoch, (step + 1) % steps_per_epoch),
                );
                if run_done {
                    // A run measured in steps: its last evaluation period may be shorter.
                    break;
                }
            }
            self.end_epoch(epoch)?;
            position = (epoch + 1, 0);
            self.checkpoint_if_due(Some(epoch + 1), position);
            if self.flow.early_stopped() {
                return Ok(Leg::Ended { reason: FinishReason::EarlyStopped, position });
            }
            epoch += 1;
        }
        Ok(Leg::Ended { reason: FinishReason::Completed, position })
    }
}
