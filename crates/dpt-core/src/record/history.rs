//! A run's history as viewers receive it: every record in order, with two rules that keep it
//! true and small.
//!
//! - A resumed run continues from its checkpoint, which may be older than the last records of
//!   the file (a crash after the checkpoint). Records after a `restored` event supersede those
//!   of a higher `global_step` before it.
//! - Long runs stay cheap: past a budget of step records, the older half is thinned to every
//!   other record. Epoch records, events, starts and summaries are always kept, and so is each
//!   epoch's last step record, so attaching to a 100-epoch run costs about what a 1-epoch run
//!   does.

use std::path::Path;

use super::file::{read_records, RecordFileError};
use super::{Change, Record, StepStats};

/// Step records kept before the older ones are thinned.
pub const STEP_BUDGET: usize = 2048;

/// The records of one run, superseded and thinned as they arrive.
#[derive(Debug, Clone)]
pub struct History {
    records: Vec<Record>,
    steps: usize,
    budget: usize,
    steps_per_epoch: usize,
}

impl Default for History {
    fn default() -> Self {
        History::with_budget(STEP_BUDGET)
    }
}

impl History {
    /// An empty history that keeps at most about `budget` step records.
    pub fn with_budget(budget: usize) -> Self {
        History { records: Vec::new(), steps: 0, budget: budget.max(2), steps_per_epoch: 1 }
    }

    /// The history recorded in `dir/metrics.jsonl`.
    pub fn read(dir: &Path) -> Result<History, RecordFileError> {
        let mut h = History::default();
        h.extend(read_records(dir)?);
        Ok(h)
    }

    pub fn extend(&mut self, records: impl IntoIterator<Item = Record>) {
        for r in records {
            self.push(r);
        }
    }

    /// Adds the next record.
    pub fn push(&mut self, record: Record) {
        match &record {
            Record::Start(info) => self.steps_per_epoch = info.steps_per_epoch.max(1),
            Record::Event(Change::Restored { global_step, .. }) => self.supersede(*global_step),
            Record::Step(s) => {
                self.steps_per_epoch = s.steps_per_epoch.max(1);
                if thinnable(s) {
                    self.steps += 1;
                }
            }
            _ => {}
        }
        self.records.push(record);
        if self.steps > self.budget {
            self.thin();
        }
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    pub fn into_records(self) -> Vec<Record> {
        self.records
    }

    /// Drops what happened after step `at` before a resume went back to it.
    fn supersede(&mut self, at: usize) {
        let spe = self.steps_per_epoch;
        self.records.retain(|r| match r {
            Record::Step(s) => s.global_step <= at,
            Record::Epoch(e) => e.epoch * spe <= at,
            Record::Event(c) => c.global_step().is_none_or(|g| g <= at),
            Record::Summary(s) => s.global_steps <= at,
            Record::Eval(e) => e.global_step <= at,
            Record::Start(_) => true,
        });
        self.count_steps();
    }

    /// Keeps every other step record of the older half (an epoch's last step always).
    fn thin(&mut self) {
        let older = self.steps / 2;
        let mut seen = 0;
        self.records.retain(|r| match r {
            Record::Step(s) if thinnable(s) => {
                seen += 1;
                seen > older || seen % 2 == 0
            }
            _ => true,
        });
        self.count_steps();
    }

    fn count_steps(&mut self) {
        self.steps = self.records.iter().filter(|r| matches!(r, Record::Step(s) if thinnable(s))).count();
    }
}

/// A step record that may be thinned: any but an epoch's last.
fn thinnable(s: &StepStats) -> bool {
    s.step != s.steps_per_epoch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::EpochStats;

    fn step(global_step: usize, spe: usize) -> Record {
        Record::Step(Box::new(StepStats {
            epoch: (global_step - 1) / spe + 1,
            step: (global_step - 1) % spe + 1,
            steps_per_epoch: spe,
            global_step,
            loss: 1.0,
            acc: 0.5,
            lr: 0.1,
            samples_per_sec: 1.0,
            timing: Default::default(),
            replicas: Vec::new(),
            grad_norm: None,
            loss_scale: None,
            skipped_steps: None,
            timed_steps: None,
            loader: None,
            overlapped: None,
            bottleneck: None,
            model_flops: None,
            mfu: None,
            cuda_syncs: None,
            scalars: Default::default(),
        }))
    }

    fn epoch(epoch: usize) -> Record {
        Record::Epoch(Box::new(EpochStats {
            epoch,
            train_loss: 1.0,
            train_acc: 0.5,
            test_loss: 1.0,
            test_acc: 0.5,
            epoch_seconds: 1.0,
            eval_seconds: 0.1,
            samples_per_sec: 1.0,
            lr: 0.1,
            ema_test_acc: None,
            ema_test_loss: None,
            top5_acc: None,
            per_class_acc: None,
            confusion: None,
        }))
    }

    #[test]
    fn long_runs_are_thinned_to_the_budget_keeping_epochs() {
        let mut h = History::with_budget(100);
        let spe = 50;
        for g in 1..=100 * spe {
            h.push(step(g, spe));
            if g % spe == 0 {
                h.push(epoch(g / spe));
            }
        }
        let steps = h.records().iter().filter(|r| matches!(r, Record::Step(_))).count();
        let epochs = h.records().iter().filter(|r| matches!(r, Record::Epoch(_))).count();
        assert_eq!(epochs, 100);
        // The budget plus the epoch-end step records that are always kept.
        assert!(steps <= 100 + 100, "{steps} step records kept");
        // The newest records are dense, and the order is kept.
        assert!(matches!(h.records().last(), Some(Record::Epoch(e)) if e.epoch == 100));
        let gs: Vec<usize> = h
            .records()
            .iter()
            .filter_map(|r| if let Record::Step(s) = r { Some(s.global_step) } else { None })
            .collect();
        assert!(gs.windows(2).all(|w| w[0] < w[1]));
        assert!(gs.ends_with(&[4998, 4999, 5000]));
    }

    #[test]
    fn a_restore_supersedes_what_followed_the_checkpoint() {
        let mut h = History::default();
        let spe = 10;
        for g in 1..=25 {
            h.push(step(g, spe));
            if g % spe == 0 {
                h.push(epoch(g / spe));
            }
        }
        h.push(Record::Event(Change::Paused { global_step: 22 }));
        h.push(Record::Event(Change::Restored { epoch: 1, step: 5, global_step: 15 }));
        let last_step = h.records().iter().rev().find_map(|r| {
            if let Record::Step(s) = r {
                Some(s.global_step)
            } else {
                None
            }
        });
        assert_eq!(last_step, Some(15));
        assert!(!h.records().iter().any(|r| matches!(r, Record::Epoch(e) if e.epoch == 2)));
        assert!(!h.records().iter().any(|r| matches!(r, Record::Event(Change::Paused { .. }))));
        assert!(h.records().iter().any(|r| matches!(r, Record::Epoch(e) if e.epoch == 1)));
    }
}
