//! A run's records folded once into what every reader of a finished or running run asks of it:
//! its epochs (a continued run's re-run epoch replacing the earlier one), the metric it judges
//! its evaluations by and its best value, its training time and how it ended. The sweep's
//! runner, pruner, board and table, `show`, `ls` and the run listings all read a run through
//! this fold, so they agree on every number; [`RunFollower`] feeds it from a growing file.

use std::path::Path;

use super::file::{read_records, RecordFileError, Tail};
use super::run_info::RunInfo;
use super::script::EvalStats;
use super::stats::{EpochStats, FinishReason};
use super::Record;
use crate::best::BestMetric;

/// What a run's records say so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFold {
    /// The run's start record (the latest, for a continued run).
    pub info: Option<Box<RunInfo>>,
    /// Its epochs, in order: epoch `k` at index `k - 1`. A continued run starts its epoch again,
    /// and that record replaces the earlier one and every one after it.
    pub epochs: Vec<EpochStats>,
    /// A script run's evaluations (`run.eval(...)`), in order.
    pub evals: Vec<EvalStats>,
    /// How the run ended; none while it runs (or where it died without a summary).
    pub finish: Option<FinishReason>,
}

impl RunFold {
    /// The fold of `records`.
    pub fn of(records: &[Record]) -> RunFold {
        let mut fold = RunFold::default();
        for record in records {
            fold.apply(record);
        }
        fold
    }

    /// The fold of the records in run directory `dir` (empty where it has none yet).
    pub fn read(dir: &Path) -> Result<RunFold, RecordFileError> {
        read_records(dir).map(|records| RunFold::of(&records))
    }

    /// Adds one record.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Start(info) => {
                self.info = Some(info.clone());
                // A continued run ends again.
                self.finish = None;
            }
            Record::Epoch(e) => {
                self.epochs.truncate(e.epoch.saturating_sub(1));
                self.epochs.push((**e).clone());
            }
            Record::Eval(e) => self.evals.push((**e).clone()),
            Record::Summary(s) => self.finish = Some(s.reason),
            _ => {}
        }
    }

    /// The metric the run judges its evaluations by: its `--best-metric`, and the loss for a
    /// run without classes, as the run itself judges (`BestMetric::judged`). A run not started
    /// yet is judged by the default.
    pub fn metric(&self) -> BestMetric {
        self.info.as_deref().map_or_else(BestMetric::default, RunInfo::judged_metric)
    }

    /// Each evaluation's value of `metric`, in order: the epochs', or a script run's own.
    pub fn values(&self, metric: BestMetric) -> Vec<f64> {
        let epochs = self.epochs.iter().map(|e| metric.of(e.test_loss, e.test_acc));
        let evals = self.evals.iter().filter_map(|e| match metric {
            BestMetric::ValAcc => e.acc(),
            BestMetric::ValLoss => e.loss(),
        });
        epochs.chain(evals).collect()
    }

    /// The best of the run's epochs by its own [`metric`](Self::metric) (NaN never best).
    pub fn best(&self) -> Option<f64> {
        self.metric().best_of(self.values(self.metric()))
    }

    /// The last epoch's record.
    pub fn last_epoch(&self) -> Option<&EpochStats> {
        self.epochs.last()
    }

    /// Training time over its epochs (evaluation and pauses left out).
    pub fn training_seconds(&self) -> f64 {
        self.epochs.iter().map(|e| e.epoch_seconds).sum()
    }

    /// Its run ended as asked: every epoch ran, or its early stop or step limit ended it.
    pub fn completed(&self) -> bool {
        use FinishReason::{Completed, EarlyStopped, StepLimit};
        matches!(self.finish, Some(Completed | EarlyStopped | StepLimit))
    }

    /// Its loss stopped being finite and `--on-nan stop` ended it.
    pub fn diverged(&self) -> bool {
        self.finish == Some(FinishReason::Diverged)
    }

    /// Its user stopped it (a dashboard, a signal).
    pub fn stopped(&self) -> bool {
        self.finish == Some(FinishReason::Stopped)
    }
}

/// A running run followed: its file read as it grows into one fold.
pub struct RunFollower {
    tail: Tail,
    pub fold: RunFold,
}

/// What one [`RunFollower::read`] brought.
pub struct Fresh {
    /// The file was replaced (a retried run's): the fold starts again with these records.
    pub restarted: bool,
    pub records: Vec<Record>,
}

impl RunFollower {
    /// The run in `dir`, nothing read yet.
    pub fn of(dir: &Path) -> RunFollower {
        RunFollower { tail: Tail::of(dir), fold: RunFold::default() }
    }

    /// Reads and folds what the run wrote since the last call; the new records, for readers
    /// that fold more of them (the board's curves).
    pub fn read(&mut self) -> Fresh {
        let read = self.tail.read();
        if read.restarted {
            self.fold = RunFold::default();
        }
        for record in &read.records {
            self.fold.apply(record);
        }
        Fresh { restarted: read.restarted, records: read.records }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Task;
    use crate::record::stats::Summary;

    fn epoch(epoch: usize, test_acc: f64, test_loss: f64, epoch_seconds: f64) -> Record {
        Record::Epoch(Box::new(EpochStats {
            epoch,
            test_acc,
            test_loss,
            epoch_seconds,
            ..Default::default()
        }))
    }

    fn start(metric: BestMetric, task: crate::model::Task) -> Record {
        let mut info = crate::record::compare::tests::info(0.1, 32, 0);
        (info.settings.best.metric, info.task) = (metric, task);
        Record::Start(Box::new(info))
    }

    #[test]
    fn a_rerun_epoch_replaces_the_earlier_one_and_counts_once() {
        // Epochs 1 and 2, then the run continued from a checkpoint inside epoch 2.
        let records = [epoch(1, 0.5, 1.2, 10.0), epoch(2, 0.9, 0.6, 10.0), epoch(2, 0.7, 0.8, 11.0)];
        let fold = RunFold::of(&records);
        assert_eq!(fold.epochs.len(), 2);
        assert_eq!(fold.training_seconds(), 21.0, "the re-run epoch's time, not both");
        assert_eq!(fold.values(BestMetric::ValAcc), [0.5, 0.7]);
        assert_eq!(fold.best(), Some(0.7), "the replaced epoch's 0.9 is gone with it");
        assert_eq!(fold.last_epoch().map(|e| e.test_acc), Some(0.7));
    }

    #[test]
    fn the_best_is_by_the_runs_own_metric_and_never_nan() {
        let mut fold = RunFold::of(&[epoch(1, 0.6, 0.9, 1.0), epoch(2, f64::NAN, f64::NAN, 1.0)]);
        assert_eq!((fold.metric(), fold.best()), (BestMetric::ValAcc, Some(0.6)));
        fold.apply(&start(BestMetric::ValLoss, Task::Classify));
        assert_eq!((fold.metric(), fold.best()), (BestMetric::ValLoss, Some(0.9)));
        // A run without classes is judged by its loss, whatever it was asked.
        fold.apply(&start(BestMetric::ValAcc, Task::Tokens));
        assert_eq!(fold.metric(), BestMetric::ValLoss);
    }

    #[test]
    fn a_script_runs_evaluations_are_its_values() {
        let eval = |step: usize, name: &str, v: f64| {
            let metrics = [(name.to_owned(), v)].into();
            Record::Eval(Box::new(EvalStats { global_step: step, metrics }))
        };
        let records =
            [start(BestMetric::ValAcc, Task::Classify), eval(10, "val_acc", 0.4), eval(20, "val_acc", 0.6)];
        assert_eq!(RunFold::of(&records).best(), Some(0.6));
        let losses = [
            start(BestMetric::ValLoss, Task::Classify),
            eval(10, "val_loss", 1.5),
            eval(20, "val_loss", 1.1),
        ];
        assert_eq!(RunFold::of(&losses).best(), Some(1.1));
        let only_loss = [start(BestMetric::ValAcc, Task::Classify), eval(10, "val_loss", 1.5)];
        assert_eq!(RunFold::of(&only_loss).best(), None, "no accuracy to judge by");
    }

    #[test]
    fn how_it_ended_is_its_last_summary_and_a_continued_run_runs_again() {
        let summary =
            |reason| Record::Summary(Box::new(Summary { reason, ..crate::record::text::tests::summary() }));
        let mut fold = RunFold::of(&[summary(FinishReason::Stopped)]);
        assert!(fold.stopped() && !fold.completed() && !fold.diverged());
        fold.apply(&start(BestMetric::ValAcc, Task::Classify));
        assert_eq!(fold.finish, None);
        fold.apply(&summary(FinishReason::EarlyStopped));
        assert!(fold.completed());
        fold.apply(&summary(FinishReason::Diverged));
        assert!(fold.diverged() && !fold.completed());
    }

    #[test]
    fn a_follower_folds_what_was_added_and_starts_again_on_a_new_file() {
        let dir = tempfile::tempdir().expect("temp");
        let path = dir.path().join(crate::record::file::METRICS_FILE);
        let line = |r: &Record| serde_json::to_string(r).expect("json") + "\n";
        std::fs::write(&path, line(&epoch(1, 0.5, 1.0, 1.0))).expect("write");
        let mut run = RunFollower::of(dir.path());
        assert_eq!(run.read().records.len(), 1);
        let mut more = std::fs::OpenOptions::new().append(true).open(&path).expect("open");
        std::io::Write::write_all(&mut more, line(&epoch(2, 0.6, 0.9, 1.0)).as_bytes()).expect("append");
        assert_eq!(run.read().records.len(), 1);
        assert_eq!(run.fold.values(BestMetric::ValAcc), [0.5, 0.6]);
        std::fs::rename(&path, dir.path().join("earlier.jsonl")).expect("moved");
        std::fs::write(&path, line(&epoch(1, 0.3, 1.5, 1.0))).expect("write");
        assert!(run.read().restarted);
        assert_eq!(run.fold.values(BestMetric::ValAcc), [0.3]);
    }
}
