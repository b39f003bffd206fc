//! Model choice over a run: which evaluation counts as the best (`--best-metric`), the K best
//! evaluations kept as checkpoints (`--keep-best K`) and stopping once the metric has not
//! improved for a number of evaluations (`--early-stop N`). The decisions are pure and a
//! checkpoint keeps their state; the coordinator writes and removes the files.

use serde::{Deserialize, Serialize};

/// What "better" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BestMetric {
    /// The evaluated set's accuracy (higher is better).
    #[default]
    ValAcc,
    /// The evaluated set's loss (lower is better).
    ValLoss,
}

impl BestMetric {
    /// The metric of an evaluation's mean loss and accuracy.
    pub fn of(self, loss: f64, acc: f64) -> f64 {
        match self {
            BestMetric::ValAcc => acc,
            BestMetric::ValLoss => loss,
        }
    }

    /// Whether `a` is better than `b` (a NaN is never better).
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            BestMetric::ValAcc => a > b,
            BestMetric::ValLoss => a < b,
        }
    }

    /// The best of `values` (NaN and infinities never best; none without a finite one).
    pub fn best_of(self, values: impl IntoIterator<Item = f64>) -> Option<f64> {
        values.into_iter().filter(|v| v.is_finite()).reduce(|a, b| if self.better(b, a) { b } else { a })
    }

    /// The metric a run asked for this one judges by: a run without classes measures no
    /// accuracy, so it is judged by its loss.
    pub fn judged(self, has_classes: bool) -> BestMetric {
        if has_classes {
            self
        } else {
            BestMetric::ValLoss
        }
    }

    /// How the board names it: the evaluated set's `test acc`, `test loss`.
    pub fn label(self) -> &'static str {
        match self {
            BestMetric::ValAcc => "test acc",
            BestMetric::ValLoss => "test loss",
        }
    }

    /// How tables and the board name it: `acc`, `loss`.
    pub fn short(self) -> &'static str {
        match self {
            BestMetric::ValAcc => "acc",
            BestMetric::ValLoss => "loss",
        }
    }
}

crate::names!(BestMetric, "metric", {
    ValAcc => "val_acc" | "test_acc" | "acc",
    ValLoss => "val_loss" | "test_loss" | "loss",
});

/// What to do after an evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// Save this evaluation as one of the best.
    pub keep: bool,
    /// Epochs whose kept checkpoints fall out of the best K.
    pub evict: Vec<usize>,
    /// The metric has not improved for the patience: stop.
    pub stop: bool,
    /// Whether this evaluation is the best so far.
    pub improved: bool,
}

/// The best evaluations so far and the patience count (in checkpoints, so a resumed run keeps
/// counting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestKeeper {
    pub metric: BestMetric,
    /// How many to keep (0: none).
    pub keep: usize,
    /// Evaluations without improvement before stopping (`None`: never).
    pub patience: Option<usize>,
    /// Kept (epoch, value), best first.
    pub kept: Vec<(usize, f64)>,
    /// The best (epoch, value) seen.
    pub best: Option<(usize, f64)>,
    pub since_best: usize,
}

impl BestKeeper {
    pub fn new(metric: BestMetric, keep: usize, patience: Option<usize>) -> Self {
        BestKeeper { metric, keep, patience, kept: Vec::new(), best: None, since_best: 0 }
    }

    /// Takes the evaluation of `epoch` (1-based) with the metric's `value`.
    pub fn observe(&mut self, epoch: usize, value: f64) -> Decision {
        let m = self.metric;
        let improved = value.is_finite() && self.best.is_none_or(|(_, b)| m.better(value, b));
        if improved {
            self.best = Some((epoch, value));
            self.since_best = 0;
        } else {
            self.since_best += 1;
        }
        let mut d = Decision { improved, ..Decision::default() };
        if self.keep > 0 && value.is_finite() {
            let at = self.kept.iter().position(|(_, v)| m.better(value, *v)).unwrap_or(self.kept.len());
            if at < self.keep {
                self.kept.insert(at, (epoch, value));
                d.keep = true;
                d.evict = self.kept.drain(self.keep.min(self.kept.len())..).map(|(e, _)| e).collect();
            }
        }
        d.stop = self.patience.is_some_and(|p| self.since_best >= p);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_of_values_is_by_the_metric_and_never_nan() {
        let values = [0.5, f64::NAN, 0.9, 0.7, f64::INFINITY];
        assert_eq!(BestMetric::ValAcc.best_of(values), Some(0.9));
        assert_eq!(BestMetric::ValLoss.best_of(values), Some(0.5));
        assert_eq!(BestMetric::ValAcc.best_of([f64::NAN]), None);
        assert_eq!(BestMetric::ValAcc.judged(false), BestMetric::ValLoss);
        assert_eq!(BestMetric::ValAcc.judged(true), BestMetric::ValAcc);
    }

    #[test]
    fn the_best_k_are_kept_and_the_rest_evicted() {
        let mut b = BestKeeper::new(BestMetric::ValAcc, 2, None);
        assert_eq!(b.observe(1, 0.5), Decision { keep: true, improved: true, ..Decision::default() });
        assert!(b.observe(2, 0.7).keep);
        let d = b.observe(3, 0.6);
        assert_eq!((d.keep, d.evict.clone(), d.improved), (true, vec![1], false));
        let d = b.observe(4, 0.55);
        assert!(!d.keep && d.evict.is_empty());
        assert_eq!(b.kept, vec![(2, 0.7), (3, 0.6)]);
        assert!(!b.observe(5, f64::NAN).keep, "a NaN is never kept");
    }

    #[test]
    fn patience_counts_evaluations_without_improvement_and_loss_is_lower_better() {
        let mut b = BestKeeper::new(BestMetric::ValLoss, 0, Some(2));
        assert!(!b.observe(1, 1.0).stop);
        assert!(!b.observe(2, 0.8).stop);
        assert!(!b.observe(3, 0.9).stop);
        assert!(b.observe(4, 0.85).stop, "two evaluations without beating 0.8");
        assert_eq!(b.best, Some((2, 0.8)));
        assert_eq!("val_loss".parse::<BestMetric>(), Ok(BestMetric::ValLoss));
        assert!("f1".parse::<BestMetric>().is_err());
    }
}
