//! The history behind the curves: points against fractional epochs, as d2l's Animator plots
//! them, plus the marks where the lr changed or training paused.

use serde::{Deserialize, Serialize};

use crate::engine::events::{EpochStats, StepStats};

/// Which quantity the curve panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CurveView {
    Loss,
    Accuracy,
    Lr,
}

impl CurveView {
    pub fn next(self) -> Self {
        match self {
            CurveView::Loss => CurveView::Accuracy,
            CurveView::Accuracy => CurveView::Lr,
            CurveView::Lr => CurveView::Loss,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            CurveView::Loss => "loss",
            CurveView::Accuracy => "accuracy",
            CurveView::Lr => "learning rate",
        }
    }
}

/// Why a vertical mark is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MarkKind {
    LrChange,
    Pause,
}

/// The series of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    pub train_loss: Vec<(f64, f64)>,
    pub train_acc: Vec<(f64, f64)>,
    pub test_loss: Vec<(f64, f64)>,
    pub test_acc: Vec<(f64, f64)>,
    pub lr: Vec<(f64, f64)>,
    pub marks: Vec<(f64, MarkKind)>,
    /// The x of the latest point: epochs done, with the current epoch's fraction.
    pub x: f64,
}

/// `epoch` (1-based) and `step` of `steps` as a fractional epoch count.
pub fn fractional_epoch(epoch: usize, step: usize, steps: usize) -> f64 {
    (epoch as f64 - 1.0) + step as f64 / steps.max(1) as f64
}

impl Curves {
    pub fn on_step(&mut self, s: &StepStats) {
        let x = fractional_epoch(s.epoch, s.step, s.steps_per_epoch);
        self.x = x;
        self.train_loss.push((x, s.loss));
        self.train_acc.push((x, s.acc));
        self.lr.push((x, s.lr));
    }

    pub fn on_epoch(&mut self, e: &EpochStats) {
        let x = e.epoch as f64;
        self.x = self.x.max(x);
        self.test_loss.push((x, e.test_loss));
        self.test_acc.push((x, e.test_acc));
    }

    /// A mark at the current position (a change applies from the next step on).
    pub fn mark(&mut self, kind: MarkKind) {
        self.marks.push((self.x, kind));
    }

    /// The lr at the current position, for the lr view between reports.
    pub fn on_lr(&mut self, lr: f64) {
        self.lr.push((self.x, lr));
    }
}

/// The x range to show: the whole run (at least up to `epochs`) or the last `window` epochs.
pub fn x_range(curves: &Curves, epochs: usize, recent: Option<f64>) -> (f64, f64) {
    match recent {
        Some(w) => {
            let hi = curves.x.max(w.min(epochs as f64)).max(1e-9);
            ((hi - w).max(0.0), hi)
        }
        None => (0.0, (epochs as f64).max(curves.x).max(1.0)),
    }
}

/// The smallest and largest y of `series` within `x`, padded a little; `None` if empty.
pub fn y_range(series: &[&[(f64, f64)]], x: (f64, f64), log: bool) -> Option<(f64, f64)> {
    let ys = series
        .iter()
        .flat_map(|s| s.iter())
        .filter(|(px, py)| *px >= x.0 - 1e-9 && *px <= x.1 + 1e-9 && py.is_finite() && (!log || *py > 0.0))
        .map(|(_, y)| if log { y.log10() } else { *y });
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if !lo.is_finite() {
        return None;
    }
    let pad = ((hi - lo) * 0.05).max(if log { 0.02 } else { 1e-3 * hi.abs().max(1e-3) });
    Some((lo - pad, hi + pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_and_windows() {
        assert_eq!(fractional_epoch(1, 50, 200), 0.25);
        assert_eq!(fractional_epoch(3, 200, 200), 3.0);
        let c = Curves { x: 4.5, ..Curves::default() };
        assert_eq!(x_range(&c, 10, None), (0.0, 10.0));
        assert_eq!(x_range(&c, 10, Some(2.0)), (2.5, 4.5));
        let early = Curves { x: 0.5, ..Curves::default() };
        assert_eq!(x_range(&early, 10, Some(2.0)), (0.0, 2.0));
    }

    #[test]
    fn y_range_filters_and_pads() {
        let a = [(0.5, 2.0), (1.0, 1.0), (9.0, 100.0)];
        let (lo, hi) = y_range(&[&a], (0.0, 2.0), false).unwrap();
        assert!(lo < 1.0 && lo > 0.9 && hi > 2.0 && hi < 2.1, "{lo} {hi}");
        let (lo, hi) = y_range(&[&a], (0.0, 10.0), true).unwrap();
        assert!(lo < 0.0 && hi > 2.0);
        assert!(y_range(&[&a], (20.0, 30.0), false).is_none());
    }
}
