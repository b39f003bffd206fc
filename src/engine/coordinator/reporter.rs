//! What the coordinator reports from: the report window and the epoch so far, the finished
//! epochs, the stragglers already named, the phase clock, the gradient norms of the window and
//! whether a non-finite loss was already warned about.

use crate::engine::clock::PhaseClock;
use crate::engine::tally::{Tally, Window};
use crate::engine::worker::FromWorker;

/// The finished epochs, for the summary and the checkpoint.
#[derive(Default)]
pub(super) struct Done {
    pub(super) epochs: usize,
    /// Training figures of the finished epochs (seconds: training time).
    pub(super) tally: Tally,
    pub(super) last_test_acc: Option<f64>,
    /// The last evaluated loss (of this attempt: a continued run evaluates again at its end).
    pub(super) last_test_loss: Option<f64>,
}

/// The slowest replica's input wait and compute in a timed step, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct StepTimes {
    pub(super) data: f64,
    pub(super) compute: f64,
}

pub(super) struct Reporter {
    pub(super) window: Window,
    pub(super) epoch: Window,
    pub(super) done: Done,
    /// Replicas already reported as stragglers.
    pub(super) straggled: Vec<bool>,
    /// Times the allreduce and the update, on the first replica's device.
    pub(super) clock: Option<PhaseClock>,
    /// The mean gradient's norm summed over the steps of the report window (on the device).
    pub(super) grad_norms: Option<tch::Tensor>,
    /// `--on-nan ignore` warned once.
    pub(super) nan_warned: bool,
    /// The train loss of the last report.
    pub(super) last_loss: Option<f64>,
}

impl Reporter {
    /// Before the first step, for `replicas` replicas in all.
    pub(super) fn new(replicas: usize) -> Reporter {
        Reporter {
            window: Window::new(replicas),
            epoch: Window::new(replicas),
            done: Done::default(),
            straggled: Vec::new(),
            clock: None,
            grad_norms: None,
            nan_warned: false,
            last_loss: None,
        }
    }
}

impl Reporter {
    /// Takes a step's replies into the window: each replica's input wait and compute (in its
    /// global slot, `offset` being this process's first replica) and its loader's figures.
    /// Returns the slowest times and the images that did not decode.
    pub(super) fn take_replies(
        &mut self,
        replies: Vec<FromWorker>,
        offset: usize,
    ) -> (StepTimes, Vec<String>) {
        let mut slowest = StepTimes::default();
        let mut bad = Vec::new();
        for reply in replies {
            if let FromWorker::StepDone { replica, timing, bad: b, loader } = reply {
                bad.extend(b);
                if let Some(l) = loader {
                    self.window.loader.add(l);
                }
                if let Some((data, compute)) = timing {
                    slowest.data = slowest.data.max(data);
                    slowest.compute = slowest.compute.max(compute);
                    let r = &mut self.window.replicas[offset + replica];
                    r.data += data;
                    r.compute += compute;
                }
            }
        }
        (slowest, bad)
    }

    /// Counts a finished step; a timed one adds its slowest times and its phases (the
    /// allreduce the backward passes did not hide, the update).
    pub(super) fn count_step(&mut self, slowest: StepTimes, phases: Option<Vec<f64>>) {
        let w = &mut self.window;
        w.steps += 1;
        if let Some(p) = phases {
            w.timed += 1;
            w.timing.data += slowest.data;
            w.timing.compute += slowest.compute;
            w.timing.allreduce += p[0];
            w.timing.update += p[1];
        }
    }

    /// Adds a step's gradient norm (on the device; read once per report).
    pub(super) fn add_grad_norm(&mut self, norm: &tch::Tensor) {
        let _ =
            self.grad_norms.get_or_insert_with(|| norm.zeros_like().to_kind(tch::Kind::Double)).g_add_(norm);
    }

    /// The replicas slower than the others in a report's step `times` that were not named
    /// before (each is named once per run), with the median time; see `record::straggler`.
    pub(super) fn new_stragglers(&mut self, times: &[f64]) -> Option<(f64, Vec<usize>)> {
        let median = crate::record::straggler::median(times)?;
        if self.straggled.len() < times.len() {
            self.straggled.resize(times.len(), false);
        }
        let new = crate::record::straggler::stragglers(times)
            .into_iter()
            .filter(|&r| !std::mem::replace(&mut self.straggled[r], true))
            .collect();
        Some((median, new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(replica: usize, timing: Option<(f64, f64)>, bad: &[&str]) -> FromWorker {
        let bad = bad.iter().map(|b| (*b).to_owned()).collect();
        FromWorker::StepDone { replica, timing, bad, loader: None }
    }

    #[test]
    fn replies_fill_their_global_slots_and_a_step_counts_its_slowest_replica() {
        // This process holds replicas 2 and 3 of 4.
        let mut r = Reporter::new(4);
        let replies = vec![done(0, Some((0.01, 0.2)), &["a.png"]), done(1, Some((0.03, 0.1)), &[])];
        let (slowest, bad) = r.take_replies(replies, 2);
        assert_eq!(slowest, StepTimes { data: 0.03, compute: 0.2 });
        assert_eq!(bad, ["a.png"]);
        assert_eq!((r.window.replicas[2].compute, r.window.replicas[3].data), (0.2, 0.03));
        assert_eq!(r.window.replicas[0].compute, 0.0, "other ranks' slots stay theirs");
        r.count_step(slowest, Some(vec![0.05, 0.01]));
        r.count_step(StepTimes::default(), None);
        let w = &r.window;
        assert_eq!((w.steps, w.timed), (2, 1), "an untimed step counts, without times");
        assert_eq!((w.timing.compute, w.timing.allreduce, w.timing.update), (0.2, 0.05, 0.01));
    }

    #[test]
    fn a_straggler_is_named_once() {
        let mut r = Reporter::new(4);
        let times = [0.1, 0.1, 0.1, 0.5];
        let (median, new) = r.new_stragglers(&times).expect("a median");
        assert_eq!((median, new), (0.1, vec![3]));
        assert_eq!(r.new_stragglers(&times).map(|(_, n)| n), Some(vec![]), "named before");
    }
}
