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
    /// Where a rewind went back to.
    Rewind,
}

/// The series of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    pub train_loss: Vec<(f64, f64)>,
    pub train_acc: Vec<(f64, f64)>,
    pub test_loss: Vec<(f64, f64)>,
    pub test_acc: Vec<(f64, f64)>,
    pub lr: Vec<(f64, f64)>,
    /// The lr the schedule plans for the whole run (rescaled from where the live key changed it).
    pub lr_plan: Vec<(f64, f64)>,
    /// The mean gradient's global norm per report window.
    pub grad_norm: Vec<(f64, f64)>,
    /// The test accuracy of the weights' moving average (`--ema`).
    pub ema_test_acc: Vec<(f64, f64)>,
    pub marks: Vec<(f64, MarkKind)>,
    /// The x of the latest point: epochs done, with the current epoch's fraction.
    pub x: f64,
    /// The run's planned epochs (the x axis reaches at least this far).
    pub epochs: usize,
    /// The run counts no classes (a language model, a model's own loss): its accuracy curves
    /// stay empty and perplexity (`exp` of the loss) takes their place.
    pub no_classes: bool,
    /// A run measured in steps (`--steps`): the steps in one unit of x (its evaluation
    /// period), so that axes count steps; `None` for a run measured in epochs.
    #[serde(default)]
    pub steps_per_x: Option<usize>,
    /// The run's loss has a perplexity (a language model): its curves take the accuracy's
    /// place; a run without classes that is not one shows its loss there.
    #[serde(default)]
    pub has_perplexity: bool,
    /// The branches a rewind abandoned, oldest first: the loss and accuracy curves from the
    /// rewind point to where the run went back (drawn dimmed under the run's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<Curves>,
    /// Steps in an epoch (a rewind's position in x).
    #[serde(default)]
    pub steps_per_epoch: usize,
    /// A script run (`dpt-tui run -- CMD`): x is its optimizer step, and its evaluations at
    /// any step are the test curves' points.
    #[serde(default)]
    pub script: bool,
    /// A script run's named figures (`run.step(name=value)`, `run.eval(...)`), by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub scalars: std::collections::BTreeMap<String, Vec<(f64, f64)>>,
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
            Record::Start(info) => {
                self.epochs = self.epochs.max(info.epochs());
                self.no_classes = !info.task.has_classes();
                self.steps_per_x = info.settings.recipe.steps.map(|_| info.steps_per_epoch.max(1));
                self.has_perplexity = info.has_perplexity();
                self.lr_plan = planned_lr(info);
                self.steps_per_epoch = info.steps_per_epoch.max(1);
                self.script = info.script.is_some();
                if let Some(script) = &info.script {
                    self.epochs = script.total_steps.unwrap_or(0);
                    self.steps_per_x = Some(1);
                    self.lr_plan.clear();
                }
            }
            Record::Step(s) => {
                let x = if self.script {
                    s.global_step as f64
                } else {
                    fractional_epoch(s.epoch, s.step, s.steps_per_epoch)
                };
                self.x = x;
                if let Some(g) = s.grad_norm {
                    self.grad_norm.push((x, g));
                    thin(&mut self.grad_norm);
                }
                for (series, y) in [(&mut self.train_loss, s.loss), (&mut self.lr, s.lr)] {
                    series.push((x, y));
                    thin(series);
                }
                if !self.no_classes {
                    self.train_acc.push((x, s.acc));
                    thin(&mut self.train_acc);
                }
                self.named(x, &s.scalars);
            }
            Record::Epoch(e) => {
                let x = e.epoch as f64;
                self.x = self.x.max(x);
                self.test_loss.push((x, e.test_loss));
                if !self.no_classes {
                    self.test_acc.push((x, e.test_acc));
                }
                if let Some(a) = e.ema_test_acc {
                    self.ema_test_acc.push((x, a));
                }
            }
            Record::Event(Change::LrChanged { from, to, .. }) => {
                // A change applies from the next step on, and scales the rest of the plan.
                self.marks.push((self.x, MarkKind::LrChange));
                self.lr.push((self.x, *to));
                if *from > 0.0 {
                    let x = self.x;
                    self.lr_plan.iter_mut().filter(|(px, _)| *px > x).for_each(|(_, y)| *y *= to / from);
                }
            }
            Record::Event(Change::Paused { .. }) => self.marks.push((self.x, MarkKind::Pause)),
            Record::Event(Change::Rewound { epoch, step, skipped, .. }) => {
                let spe = self.steps_per_epoch.max(1) as f64;
                let at = *epoch as f64 + *step as f64 / spe;
                self.abandon_after(at);
                self.marks.push((at, MarkKind::Rewind));
                if *skipped > 0 {
                    // The skipped batches are a gap in the curves, not a line across them.
                    for series in
                        [&mut self.train_loss, &mut self.test_loss, &mut self.lr, &mut self.grad_norm]
                    {
                        series.push((at, f64::NAN));
                    }
                    if !self.no_classes {
                        self.train_acc.push((at, f64::NAN));
                        self.test_acc.push((at, f64::NAN));
                    }
                }
                // The run goes on from the point, past the batches it skipped.
                self.x = at + *skipped as f64 / spe;
            }
            Record::Eval(e) => {
                let x = e.global_step as f64;
                self.x = self.x.max(x);
                if let Some(loss) = e.loss() {
                    self.test_loss.push((x, loss));
                }
                if let (Some(acc), false) = (e.acc(), self.no_classes) {
                    self.test_acc.push((x, acc));
                }
                self.named(x, &e.metrics);
            }
            Record::Event(_) | Record::Summary(_) => {}
        }
    }

    /// Whether the run counts its predictions per class (the per-class view): a native
    /// classifier; a script reports an accuracy at most.
    pub fn counts_classes(&self) -> bool {
        !self.no_classes && !self.script
    }

    /// Adds a point at `x` to each named figure's series.
    fn named(&mut self, x: f64, figures: &std::collections::BTreeMap<String, f64>) {
        for (name, y) in figures {
            let series = self.scalars.entry(name.clone()).or_default();
            series.push((x, *y));
            thin(series);
        }
    }

    /// Moves the loss and accuracy points after `x` into an abandoned branch, and drops the
    /// other curves' (the lr, the gradient norm, the moving average) after it.
    fn abandon_after(&mut self, x: f64) {
        let after = |series: &mut Vec<(f64, f64)>| {
            let cut = series.iter().position(|(px, _)| *px > x + 1e-9).unwrap_or(series.len());
            series.split_off(cut)
        };
        let branch = Curves {
            train_loss: after(&mut self.train_loss),
            train_acc: after(&mut self.train_acc),
            test_loss: after(&mut self.test_loss),
            test_acc: after(&mut self.test_acc),
            ..Curves::default()
        };
        for series in [&mut self.lr, &mut self.grad_norm, &mut self.ema_test_acc] {
            after(series);
        }
        if !branch.is_empty() {
            self.abandoned.push(branch);
        }
    }

    /// Perplexity, `exp` of each loss point (train, then test).
    pub fn perplexity(&self) -> [Vec<(f64, f64)>; 2] {
        [&self.train_loss, &self.test_loss].map(|s| s.iter().map(|&(x, y)| (x, y.exp())).collect())
    }

    /// What x counts and how many of it one unit of x is: steps for a run measured in steps,
    /// epochs otherwise.
    pub fn x_unit(&self) -> (&'static str, f64) {
        match self.steps_per_x {
            Some(n) => ("step", n as f64),
            None => ("epoch", 1.0),
        }
    }

    /// Whether there is anything to draw.
    pub fn is_empty(&self) -> bool {
        self.train_loss.is_empty() && self.test_loss.is_empty()
    }
}

/// Points the planned lr curve has at most.
const PLAN_POINTS: usize = 400;

/// The lr the run's schedule plans, as points at the x where each step's report would be (none
/// for a record without a schedule).
fn planned_lr(info: &super::RunInfo) -> Vec<(f64, f64)> {
    let s = &info.settings;
    // A constant rate plans the line the lr curve draws anyway.
    if s.schedule == Default::default() {
        return Vec::new();
    }
    let schedule = &s.schedule;
    let spe = info.steps_per_epoch.max(1);
    let total = spe * info.epochs();
    let base = s.base_lr();
    let plan = crate::optim::schedule::LrPlan {
        base,
        schedule: schedule.clone(),
        total,
        steps_per_epoch: spe,
        scale: info.lr_scale.unwrap_or(1.0),
    };
    let every = total.div_ceil(PLAN_POINTS).max(1);
    (0..total)
        .filter(|t| t % every == 0 || t + 1 == total)
        .map(|t| ((t + 1) as f64 / spe as f64, plan.at(t)))
        .collect()
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
    fn the_planned_lr_follows_the_schedule_and_the_live_key_rescales_its_rest() {
        use crate::optim::schedule::{Schedule, Shape};
        use crate::optim::OptimConfig;
        let mut info = crate::record::compare::tests::info(0.1, 32, 0);
        (info.settings.recipe.epochs, info.steps_per_epoch) = (2, 10);
        info.settings.optimizer = OptimConfig::sgd(0.1, 0.0, 0.0);
        info.settings.schedule = Schedule { shape: Shape::Cosine, warmup_steps: 4, min_lr: 0.0, gamma: 0.1 };
        let mut c = Curves::default();
        c.apply(&Record::Start(Box::new(info)));
        assert_eq!(c.lr_plan.len(), 20);
        assert_eq!(c.lr_plan[0], (0.1, 0.1 / 4.0), "warm-up: the first step's lr at its report");
        assert!((c.lr_plan[3].1 - 0.1).abs() < 1e-12);
        assert!(c.lr_plan.windows(2).skip(4).all(|w| w[1].1 < w[0].1), "then cosine down");
        c.x = 1.0;
        let before = c.lr_plan[15].1;
        c.apply(&Record::Event(Change::LrChanged { from: 0.05, to: 0.025, global_step: 10 }));
        assert!((c.lr_plan[15].1 - before / 2.0).abs() < 1e-12);
        assert_eq!(
            c.lr_plan[5].1,
            crate::optim::schedule::Schedule {
                shape: Shape::Cosine,
                warmup_steps: 4,
                min_lr: 0.0,
                gamma: 0.1
            }
            .lr_at(0.1, 5, 20, 10),
            "the past stays as planned"
        );
    }

    #[test]
    fn a_rewind_moves_the_points_after_its_point_into_a_dimmed_branch() {
        let mut info = crate::record::compare::tests::info(0.1, 32, 0);
        info.steps_per_epoch = 10;
        let mut c = Curves::default();
        c.apply(&Record::Start(Box::new(info)));
        for g in 1..=14 {
            let s = crate::record::StepStats {
                epoch: (g - 1) / 10 + 1,
                step: (g - 1) % 10 + 1,
                steps_per_epoch: 10,
                global_step: g,
                loss: g as f64,
                lr: 0.1,
                ..Default::default()
            };
            c.apply(&Record::Step(Box::new(s)));
        }
        // Back to step 8 (epoch 0, step 8) from step 14, skipping the 6 batches since.
        let rewound = Change::Rewound { from: 14, to: 8, epoch: 0, step: 8, lr: 0.05, skipped: 6 };
        c.apply(&Record::Event(rewound));
        assert_eq!(c.train_loss[c.train_loss.len() - 2], (0.8, 8.0), "the kept branch ends at the point");
        let branch = &c.abandoned[0];
        assert_eq!(
            branch.train_loss.iter().map(|p| p.1).collect::<Vec<_>>(),
            [9.0, 10.0, 11.0, 12.0, 13.0, 14.0]
        );
        assert!(c.lr.iter().all(|(x, _)| *x <= 0.8 + 1e-9), "the lr after the point is dropped");
        assert!(c.marks.contains(&(0.8, MarkKind::Rewind)));
        assert!((c.x - 1.4).abs() < 1e-12, "the run goes on past the skipped batches");
        assert!(c.train_loss.last().unwrap().1.is_nan(), "the skipped batches are a gap");
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
