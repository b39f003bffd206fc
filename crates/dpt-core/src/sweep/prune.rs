//! Early stopping of a sweep's trials (`--prune`): a trial that falls behind the others at an
//! epoch is stopped and its place handed to the next trial. Two rules, with the definitions
//! and defaults of Optuna's pruners, which users know:
//!
//! - `median` (Optuna's `MedianPruner`: 5 startup trials, no warm-up, every epoch): once 5
//!   trials have finished, a trial whose best value so far is worse than the median of the
//!   finished trials' values at the same epoch is stopped.
//! - `asha` (asynchronous successive halving, Li et al. 2018, as Optuna's
//!   `SuccessiveHalvingPruner`: minimum resource 1 epoch, reduction factor 4, minimum early
//!   stopping rate 0): rungs at epochs 1, 4, 16, …; a trial reaching a rung goes on only if
//!   its value there is among the best quarter of the values every trial had there (the best
//!   one while fewer than 4 have reached it).
//!
//! The value is the evaluation the run's `--best-metric` names (accuracy: higher is better;
//! loss: lower). Under the median rule a trial none of whose values so far is a number is
//! stopped; under ASHA a value at a rung that is not finite stops it.

use serde::{Deserialize, Serialize};

use crate::best::BestMetric;

/// Finished trials the median rule waits for before it stops any (Optuna's `n_startup_trials`).
pub const MEDIAN_STARTUP: usize = 5;
/// ASHA's reduction factor η: a quarter of the trials at a rung go on to the next.
pub const ASHA_REDUCTION: usize = 4;

/// How a sweep stops trials early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prune {
    #[default]
    None,
    Median,
    Asha,
}

crate::names!(Prune, "pruning rule", {
    None => "none",
    Median => "median",
    Asha => "asha",
});

/// What a trial's records say of it: its value after each epoch (index 0: epoch 1), whether
/// its run finished, and under ASHA the value it was judged with at each rung it reached.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Curve {
    pub values: Vec<f64>,
    pub finished: bool,
    pub rungs: Vec<f64>,
}

/// The rule and the metric it reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pruner {
    pub rule: Prune,
    pub metric: BestMetric,
}

impl Pruner {
    /// Whether trial `t` of `curves`, at its latest epoch, is to be stopped, and why. Under
    /// ASHA the rungs it passes are recorded in its curve (they are what later trials compete
    /// with), each with its value at the rung's epoch. Judge every epoch in turn, as a run
    /// reports them (`Pruning` does).
    pub fn judge(&self, t: usize, curves: &mut [Curve]) -> Option<String> {
        match self.rule {
            Prune::None => None,
            Prune::Median => self.median(t, curves),
            Prune::Asha => self.asha(t, curves),
        }
    }

    fn median(&self, t: usize, curves: &[Curve]) -> Option<String> {
        let own = &curves[t].values;
        let epoch = own.len();
        if epoch == 0 {
            return None;
        }
        let finished = curves.iter().enumerate().filter(|(i, c)| *i != t && c.finished).count();
        if finished < MEDIAN_STARTUP {
            return None;
        }
        // The best value so far, NaNs left out (Optuna's nanmax / nanmin); none: stopped.
        let best =
            own.iter()
                .copied()
                .filter(|v| !v.is_nan())
                .reduce(|a, b| if self.metric.better(b, a) { b } else { a });
        let name = self.metric.name();
        let Some(best) = best else {
            return Some(format!("its {name} is not a number at any epoch up to {epoch}"));
        };
        let mut at: Vec<f64> = curves
            .iter()
            .enumerate()
            .filter(|(i, c)| *i != t && c.finished)
            .filter_map(|(_, c)| c.values.get(epoch - 1).copied())
            .filter(|v| !v.is_nan())
            .collect();
        let median = median(&mut at)?;
        self.metric.better(median, best).then(|| {
            format!(
                "at epoch {epoch} its best {name} {best:.4} is worse than the median {median:.4} of {} finished trials",
                at.len()
            )
        })
    }

    fn asha(&self, t: usize, curves: &mut [Curve]) -> Option<String> {
        let epoch = curves[t].values.len();
        let name = self.metric.name();
        loop {
            let rung = curves[t].rungs.len();
            let resource = ASHA_REDUCTION.checked_pow(u32::try_from(rung).ok()?)?;
            if epoch < resource {
                return None;
            }
            // Its value at the rung's epoch (later epochs may have been read with it).
            let value = curves[t].values[resource - 1];
            if !value.is_finite() {
                return Some(format!("its {name} is not finite at epoch {epoch}"));
            }
            curves[t].rungs.push(value);
            let mut competing: Vec<f64> = curves.iter().filter_map(|c| c.rungs.get(rung).copied()).collect();
            // Best first.
            let m = self.metric;
            competing.sort_by(|a, b| match (m.better(*a, *b), m.better(*b, *a)) {
                (true, _) => std::cmp::Ordering::Less,
                (_, true) => std::cmp::Ordering::Greater,
                _ => std::cmp::Ordering::Equal,
            });
            let promoted = (competing.len() / ASHA_REDUCTION).max(1);
            let bar = competing[promoted - 1];
            if self.metric.better(bar, value) {
                return Some(format!(
                    "at rung {rung} (epoch {resource}) its {name} {value:.4} is not among the best {promoted} of the {} trials there",
                    competing.len()
                ));
            }
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count), as NumPy's.
fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(values: &[f64]) -> Curve {
        Curve { values: values.to_vec(), finished: true, rungs: Vec::new() }
    }

    fn running(values: &[f64]) -> Curve {
        Curve { values: values.to_vec(), finished: false, rungs: Vec::new() }
    }

    const ACC: Pruner = Pruner { rule: Prune::Median, metric: BestMetric::ValAcc };

    #[test]
    fn the_median_rule_waits_for_five_finished_trials_then_stops_one_below_their_median() {
        let five: Vec<Curve> = [0.5, 0.6, 0.7, 0.8, 0.9].iter().map(|&v| finished(&[v, v + 0.05])).collect();
        let mut curves = five[..4].to_vec();
        curves.push(running(&[0.1]));
        assert_eq!(ACC.judge(4, &mut curves), None, "4 finished: too early");
        let mut curves = five.clone();
        curves.push(running(&[0.69]));
        let why = ACC.judge(5, &mut curves).expect("below the median 0.7");
        assert!(
            why.contains("at epoch 1 its best val_acc 0.6900 is worse than the median 0.7000 of 5 finished"),
            "{why}"
        );
        // Its best so far is judged: 0.72 (epoch 1) is below the epoch-2 median 0.75, 0.76 above.
        curves[5] = running(&[0.72, 0.1]);
        assert!(ACC.judge(5, &mut curves).unwrap().contains("at epoch 2 its best val_acc 0.7200"));
        curves[5] = running(&[0.76, 0.1]);
        assert_eq!(ACC.judge(5, &mut curves), None, "its best is above the epoch-2 median 0.75");
        // An even count: the mean of the middle two; a loss: lower is better.
        let loss = Pruner { rule: Prune::Median, metric: BestMetric::ValLoss };
        let mut curves: Vec<Curve> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().map(|&v| finished(&[v])).collect();
        curves.push(running(&[3.6]));
        assert!(loss.judge(6, &mut curves).unwrap().contains("median 3.5000 of 6"));
        curves[6] = running(&[3.4]);
        assert_eq!(loss.judge(6, &mut curves), None);
        curves[6] = running(&[f64::NAN]);
        assert!(loss.judge(6, &mut curves).unwrap().contains("not a number at any epoch up to 1"));
        // A NaN once does not stick: the best of the others is judged.
        curves[6] = running(&[f64::NAN, 2.5]);
        let mut five: Vec<Curve> = [1.0, 2.0, 3.0, 4.0, 5.0].iter().map(|&v| finished(&[v, v])).collect();
        five.push(curves[6].clone());
        assert_eq!(loss.judge(5, &mut five), None, "2.5 is below the epoch-2 median 3.0");
        // Trials shorter than the epoch judged do not count.
        let mut curves: Vec<Curve> = (0..5).map(|_| finished(&[0.9])).collect();
        curves.push(running(&[0.1, 0.1]));
        assert_eq!(ACC.judge(5, &mut curves), None, "no finished trial has an epoch 2");
    }

    #[test]
    fn asha_keeps_the_best_quarter_at_each_rung() {
        let asha = Pruner { rule: Prune::Asha, metric: BestMetric::ValAcc };
        let mut curves = vec![running(&[0.5]), running(&[0.4]), running(&[0.6])];
        assert_eq!(asha.judge(0, &mut curves), None, "alone at rung 0: the best");
        assert!(asha.judge(1, &mut curves).unwrap().contains("not among the best 1 of the 2 trials"));
        assert_eq!(asha.judge(2, &mut curves), None, "the best of 3");
        assert_eq!(curves[2].rungs, [0.6]);
        // Epochs 2 and 3 are between rungs; epoch 4 is rung 1.
        curves[2].values = vec![0.6, 0.65, 0.7];
        assert_eq!(asha.judge(2, &mut curves), None);
        assert_eq!(curves[2].rungs.len(), 1);
        curves[2].values.push(0.75);
        assert_eq!(asha.judge(2, &mut curves), None, "alone at rung 1");
        assert_eq!(curves[2].rungs, [0.6, 0.75]);
        // With 8 at a rung, the best 2 go on.
        let mut curves: Vec<Curve> =
            (0..7).map(|i| Curve { rungs: vec![0.1 * i as f64], ..running(&[0.0]) }).collect();
        curves.push(running(&[0.45]));
        assert!(asha.judge(7, &mut curves).unwrap().contains("not among the best 2 of the 8"));
        curves[7] = running(&[0.5]);
        assert_eq!(asha.judge(7, &mut curves), None, "0.5 ties the second best 0.5: on");
    }
}
