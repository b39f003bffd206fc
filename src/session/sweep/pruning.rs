//! A sweep's early stopping while it runs: every trial's curve (the finished ones' read once,
//! the running ones' followed as their records grow), the rule judging each running trial at
//! every new epoch, and the trials asked to stop with why. The rules are
//! `dpt_tui::sweep::prune`'s; the sweep sends the signal and records the outcome.

use std::collections::HashMap;
use std::path::Path;

use dpt_core::best::BestMetric;
use dpt_tui::record::Record;
use dpt_tui::sweep::prune::{Curve, Prune, Pruner};
use dpt_tui::sweep::{Trial, TrialState};

use dpt_tui::record::run::RunFollower;

pub struct Pruning {
    pruner: Pruner,
    /// Every trial's curve, in trial order.
    curves: Vec<Curve>,
    /// The running trials' records as read so far.
    following: HashMap<usize, Progress>,
    /// Trials asked to stop, with why.
    stopping: HashMap<usize, String>,
}

impl Pruning {
    /// Early stopping by `rule` on `metric` for the trials of the sweep in `folder`, the
    /// finished ones' curves read now.
    pub fn new(rule: Prune, metric: BestMetric, folder: &Path, trials: &[Trial]) -> Pruning {
        // The trials' runs say the metric they are judged by (the loss for a run without
        // classes): the one asked is the pruner's until a trial has started.
        let mut judged = None;
        let curves = trials
            .iter()
            .map(|t| {
                let mut curve = Curve { rungs: t.rungs.clone(), ..Curve::default() };
                if rule != Prune::None && t.state.is_settled() {
                    let mut p = Progress::of(&folder.join(&t.dir));
                    p.read();
                    judged = judged.or(p.metric());
                    curve.values = p.curve.values;
                    curve.finished = t.state == TrialState::Finished;
                }
                curve
            })
            .collect();
        Pruning {
            pruner: Pruner { rule, metric: judged.unwrap_or(metric) },
            curves,
            following: HashMap::new(),
            stopping: HashMap::new(),
        }
    }

    /// Whether any trial may be stopped early.
    pub fn active(&self) -> bool {
        self.pruner.rule != Prune::None
    }

    /// Trial `t` started (or continues) in `dir`.
    pub fn started(&mut self, t: usize, dir: &Path) {
        if self.active() {
            self.following.insert(t, Progress::of(dir));
        }
    }

    /// Reads the running trials' new records and judges each that reached a new epoch; the
    /// trials to stop now, with why.
    pub fn poll(&mut self) -> Vec<(usize, String)> {
        let mut stop = Vec::new();
        let mut followed: Vec<usize> = self.following.keys().copied().collect();
        followed.sort_unstable();
        for t in followed {
            if self.stopping.contains_key(&t) {
                continue;
            }
            let Some(p) = self.following.get_mut(&t) else { continue };
            let judged = self.curves[t].values.len();
            if !p.read() {
                continue;
            }
            if let Some(metric) = p.metric() {
                self.pruner.metric = metric;
            }
            let values = p.curve.values.clone();
            if let Some(why) = self.judge_epochs(t, &values, judged) {
                self.stopping.insert(t, why.clone());
                stop.push((t, why));
            }
        }
        stop
    }

    /// Judges trial `t` at each of its epochs after the first `judged`, as a run reporting
    /// them one at a time would be; the first verdict to stop it, if any.
    fn judge_epochs(&mut self, t: usize, values: &[f64], judged: usize) -> Option<String> {
        let from = judged.min(values.len());
        if from == values.len() {
            self.curves[t].values = values.to_vec();
        }
        for epoch in from + 1..=values.len() {
            self.curves[t].values = values[..epoch].to_vec();
            if let Some(why) = self.pruner.judge(t, &mut self.curves) {
                self.curves[t].values = values.to_vec();
                return Some(why);
            }
        }
        None
    }

    /// Trial `t`'s values at the rungs it reached (ASHA's), to keep in `sweep.json`.
    pub fn rungs(&self, t: usize) -> &[f64] {
        &self.curves[t].rungs
    }

    /// Trial `t`'s process ended, its run `finished` or not; why it was asked to stop, if it
    /// was.
    pub fn ended(&mut self, t: usize, finished: bool) -> Option<String> {
        if let Some(mut p) = self.following.remove(&t) {
            let judged = self.curves[t].values.len();
            p.read();
            if finished {
                // Its last epochs are judged too: their rungs are what later trials meet.
                let _ = self.judge_epochs(t, &p.curve.values, judged);
            }
            self.curves[t].values = p.curve.values;
        }
        self.curves[t].finished = finished;
        self.stopping.remove(&t)
    }
}

/// One trial's epoch values of its run's metric so far, from its records as they grow.
pub struct Progress {
    run: RunFollower,
    pub curve: Curve,
}

impl Progress {
    /// The progress of the run in `dir`, nothing read yet.
    pub fn of(dir: &Path) -> Progress {
        Progress { run: RunFollower::of(dir), curve: Curve::default() }
    }

    /// The metric its run judges by, once its start record is read.
    pub fn metric(&self) -> Option<BestMetric> {
        self.run.fold.info.as_ref().map(|_| self.run.fold.metric())
    }

    /// Reads the records written since the last call; whether an epoch's value was added (a
    /// continued run's re-run epoch replaces the earlier value, as the fold has it).
    pub fn read(&mut self) -> bool {
        let before = self.curve.values.len();
        let fresh = self.run.read();
        self.curve.values = self.run.fold.values(self.run.fold.metric());
        let epochs = fresh.records.iter().any(|r| matches!(r, Record::Epoch(_)));
        epochs && (fresh.restarted || self.curve.values.len() > before)
    }
}
