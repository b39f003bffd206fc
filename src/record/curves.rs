//! The record folded into curves: points against fractional epochs, as d2l's Animator plots
//! them, and the marks where the lr changed or training paused. The dashboard, `show` and the
//! picture all draw these.

use serde::{Deserialize, Serialize};

use super::{Change, Record};

/// Points a series keeps before its older half is thinned (plenty for a screen or a picture).
pub const POINT_BUDGET: usize = 4096;

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
    /// The run's planned epochs (the x axis reaches at least this far).
    pub epochs: usize,
}

/// `epoch` (1-based) and `step` of `steps` as a fractional epoch count.
pub fn fractional_epoch(epoch: usize, step: usize, steps: usize) -> f64 {
    (epoch as f64 - 1.0) + step as f64 / steps.max(1) as f64
}

/// Keeps every other point of the older half once `points` exceeds the budget.
fn thin(points: &mut Vec<(f64, f64)>) {
    if points.len() > POINT_BUDGET {
        let older = points.len() / 2;
        let mut i = 0;
        points.retain(|_| {
            i += 1;
            i > older || i % 2 == 0
        });
    }
}

impl Curves {
    /// The curves of a whole record.
    pub fn of(records: &[Record]) -> Curves {
        let mut c = Curves::default();
        for r in records {
            c.apply(r);
        }
        c
    }

    /// Folds one record in.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Start(info) => self.epochs = self.epochs.max(info.epochs),
            Record::Step(s) => {
                let x = fractional_epoch(s.epoch, s.step, s.steps_per_epoch);
                self.x = x;
                for (series, y) in
                    [(&mut self.train_loss, s.loss), (&mut self.train_acc, s.acc), (&mut self.lr, s.lr)]
                {
                    series.push((x, y));
                    thin(series);
                }
            }
            Record::Epoch(e) => {
                let x = e.epoch as f64;
                self.x = self.x.max(x);
                self.test_loss.push((x, e.test_loss));
                self.test_acc.push((x, e.test_acc));
            }
            Record::Event(Change::LrChanged { to, .. }) => {
                // A change applies from the next step on.
                self.marks.push((self.x, MarkKind::LrChange));
                self.lr.push((self.x, *to));
            }
            Record::Event(Change::Paused { .. }) => self.marks.push((self.x, MarkKind::Pause)),
            Record::Event(_) | Record::Summary(_) => {}
        }
    }

    /// Whether there is anything to draw.
    pub fn is_empty(&self) -> bool {
        self.train_loss.is_empty() && self.test_loss.is_empty()
    }
}

/// The x range to show: the whole run (at least up to its epochs) or the last `window` epochs.
pub fn x_range(curves: &Curves, recent: Option<f64>) -> (f64, f64) {
    let epochs = curves.epochs as f64;
    match recent {
        Some(w) => {
            let hi = curves.x.max(w.min(epochs)).max(1e-9);
            ((hi - w).max(0.0), hi)
        }
        None => (0.0, epochs.max(curves.x).max(1.0)),
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
        let c = Curves { x: 4.5, epochs: 10, ..Curves::default() };
        assert_eq!(x_range(&c, None), (0.0, 10.0));
        assert_eq!(x_range(&c, Some(2.0)), (2.5, 4.5));
        let early = Curves { x: 0.5, epochs: 10, ..Curves::default() };
        assert_eq!(x_range(&early, Some(2.0)), (0.0, 2.0));
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

    #[test]
    fn series_stay_within_the_budget_in_order() {
        let mut v = Vec::new();
        for i in 0..(POINT_BUDGET * 10) {
            v.push((i as f64, 0.0));
            thin(&mut v);
        }
        assert!(v.len() <= POINT_BUDGET);
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(v.last().unwrap().0, (POINT_BUDGET * 10 - 1) as f64);
    }
}
