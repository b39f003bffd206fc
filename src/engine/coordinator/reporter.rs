//! What the coordinator reports from: the report window and the epoch so far, the finished
//! epochs, the stragglers already named, the phase clock, the gradient norms of the window and
//! whether a non-finite loss was already warned about.

use super::timed::TimedSteps;
use crate::engine::clock::{PhaseClock, Phases};
use crate::engine::tally::{Tally, Window};
use crate::engine::worker::FromWorker;
use crate::flops::{ModelFlops, PeakFlops};

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

pub(super) struct Reporter {
    pub(super) window: Window,
    pub(super) epoch: Window,
    pub(super) done: Done,
    /// Replicas already reported as stragglers.
    pub(super) straggled: Vec<bool>,
    /// Times the allreduce and the update, on the first replica's device.
    pub(super) clock: Option<PhaseClock>,
    /// The timed steps not yet complete (see `timed.rs`).
    pub(super) timed: TimedSteps,
    /// The mean gradient's norm summed over the steps of the report window (on the device).
    pub(super) grad_norms: Option<tch::Tensor>,
    /// `--on-nan ignore` warned once.
    pub(super) nan_warned: bool,
    /// The train loss of the last report.
    pub(super) last_loss: Option<f64>,
    /// The model's FLOPs, once a replica has counted them.
    flops: Option<ModelFlops>,
    /// What the run's GPUs can do at most in its precision (unknown GPUs, the CPU: none).
    peak: Option<PeakFlops>,
    /// With `DPT_SYNC_DEBUG`, the synchronizing CUDA calls counted so far.
    syncs: Option<crate::device::sync_debug::SyncTally>,
}

impl Reporter {
    /// Before the first step, for `replicas` replicas in all, `local` of them in this process.
    pub(super) fn new(replicas: usize, local: usize, peak: Option<PeakFlops>) -> Reporter {
        Reporter {
            window: Window::new(replicas),
            epoch: Window::new(replicas),
            done: Done::default(),
            straggled: Vec::new(),
            clock: None,
            timed: TimedSteps::new(local),
            grad_norms: None,
            nan_warned: false,
            last_loss: None,
            flops: None,
            peak,
            syncs: None,
        }
    }

    /// Counts the synchronizing CUDA calls per report window when `on`.
    pub(super) fn counting_syncs(mut self, on: bool) -> Reporter {
        self.syncs = on.then(crate::device::sync_debug::SyncTally::start).and_then(Result::ok);
        self
    }

    /// Synchronizing CUDA calls per step over a window of `steps` steps ending now, when counted.
    pub(super) fn syncs_per_step(&mut self, steps: usize) -> Option<f64> {
        self.syncs.as_mut().and_then(|t| t.per_step(steps))
    }
}

impl Reporter {
    /// Takes a step's replies: each replica's timing of a timed step (this one or an earlier
    /// one, see `timed.rs`) and its loader's figures. Returns the images that did not decode.
    pub(super) fn take_replies(&mut self, replies: Vec<FromWorker>) -> Vec<String> {
        let mut bad = Vec::new();
        for reply in replies {
            if let FromWorker::StepDone { replica, timing, bad: b, loader, flops } = reply {
                bad.extend(b);
                if let (None, Some(f)) = (self.flops, flops) {
                    self.flops = Some(ModelFlops { forward_per_sample: f });
                }
                if let Some(l) = loader {
                    self.window.loader.add(l);
                }
                if let Some(t) = timing {
                    self.timed.replica(replica, &t);
                }
            }
        }
        bad
    }

    /// Counts the step that ended at `now` with the coordinator's `phases` (of this timed step
    /// or an earlier one), and adds every timed step now complete: its slowest replica's input
    /// wait and compute, its phases (the allreduce the backward passes did not hide, the
    /// update), and each replica's times in its global slot (`offset`: this process's first
    /// replica).
    pub(super) fn count_step(&mut self, phases: Option<Phases>, offset: usize, now: usize) {
        let w = &mut self.window;
        w.steps += 1;
        if let Some(p) = phases {
            self.timed.coordinator(p);
        }
        for step in self.timed.complete(now) {
            w.timed += 1;
            for (r, &(data, compute)) in step.replicas.iter().enumerate() {
                let slot = &mut w.replicas[offset + r];
                slot.data += data;
                slot.compute += compute;
            }
            w.timing.data += step.replicas.iter().map(|r| r.0).fold(0.0, f64::max);
            w.timing.compute += step.replicas.iter().map(|r| r.1).fold(0.0, f64::max);
            w.timing.allreduce += step.phases.first().copied().unwrap_or(0.0);
            w.timing.update += step.phases.get(1).copied().unwrap_or(0.0);
        }
    }

    /// The model FLOP/s a throughput of `samples_per_sec` achieves and its share of the peak,
    /// once the FLOPs are counted.
    pub(super) fn model_flops(&self, samples_per_sec: f64) -> (Option<f64>, Option<f64>) {
        let Some(f) = self.flops else { return (None, None) };
        (
            Some(f.achieved(samples_per_sec)),
            self.peak.as_ref().and_then(|p| f.utilisation(samples_per_sec, p)),
        )
    }

    /// The model's forward FLOPs per sample and the peak, for the summary.
    pub(super) fn flops_facts(&self) -> (Option<f64>, Option<PeakFlops>) {
        (self.flops.map(|f| f.forward_per_sample), self.peak.clone())
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

    fn done(replica: usize, timing: Option<(usize, f64, f64)>, bad: &[&str]) -> FromWorker {
        let bad = bad.iter().map(|b| (*b).to_owned()).collect();
        let timing = timing.map(|(step, data, compute)| Phases { step, seconds: vec![data, compute] });
        FromWorker::StepDone { replica, timing, bad, loader: None, flops: None }
    }

    #[test]
    fn replies_fill_their_global_slots_and_a_step_counts_its_slowest_replica() {
        // This process holds replicas 2 and 3 of 4.
        let mut r = Reporter::new(4, 2, None);
        let replies = vec![done(0, Some((5, 0.01, 0.2)), &["a.png"]), done(1, Some((5, 0.03, 0.1)), &[])];
        assert_eq!(r.take_replies(replies), ["a.png"]);
        r.count_step(Some(Phases { step: 5, seconds: vec![0.05, 0.01] }), 2, 5);
        assert_eq!((r.window.replicas[2].compute, r.window.replicas[3].data), (0.2, 0.03));
        assert_eq!(r.window.replicas[0].compute, 0.0, "other ranks' slots stay theirs");
        r.take_replies(vec![done(0, None, &[]), done(1, None, &[])]);
        r.count_step(None, 2, 6);
        let w = &r.window;
        assert_eq!((w.steps, w.timed), (2, 1), "an untimed step counts, without times");
        assert_eq!((w.timing.data, w.timing.compute), (0.03, 0.2), "the slowest replica's");
        assert_eq!((w.timing.allreduce, w.timing.update), (0.05, 0.01));
    }

    #[test]
    fn a_step_timed_on_a_gpu_counts_when_its_last_part_is_read() {
        let mut r = Reporter::new(2, 2, None);
        // Step 13: replica 0's events read at its end, the coordinator's and replica 1's at
        // the end of step 14.
        r.take_replies(vec![done(0, Some((13, 0.001, 0.02)), &[]), done(1, None, &[])]);
        r.count_step(None, 0, 13);
        assert_eq!((r.window.steps, r.window.timed), (1, 0));
        assert_eq!(r.window.replicas[0].compute, 0.0, "not before the step is complete");
        r.take_replies(vec![done(0, None, &[]), done(1, Some((13, 0.002, 0.03)), &[])]);
        r.count_step(Some(Phases { step: 13, seconds: vec![0.004, 0.001] }), 0, 14);
        let w = &r.window;
        assert_eq!((w.steps, w.timed), (2, 1));
        assert_eq!((w.replicas[0].compute, w.replicas[1].compute), (0.02, 0.03));
        assert_eq!((w.timing.compute, w.timing.allreduce), (0.03, 0.004));
    }

    #[test]
    fn a_straggler_is_named_once() {
        let mut r = Reporter::new(4, 4, None);
        let times = [0.1, 0.1, 0.1, 0.5];
        let (median, new) = r.new_stragglers(&times).expect("a median");
        assert_eq!((median, new), (0.1, vec![3]));
        assert_eq!(r.new_stragglers(&times).map(|(_, n)| n), Some(vec![]), "named before");
    }
}
