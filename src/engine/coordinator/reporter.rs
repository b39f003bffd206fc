//! What the coordinator reports from, and the records it makes of it: the report window and
//! the epoch so far, the finished epochs, the stragglers already named, the phase clock, the
//! gradient norms of the window, the model's FLOPs. The loop hands it each step's replies and
//! phases, the window's end and the epoch's evaluation; it answers with the step, epoch and
//! summary records.

use super::timed::TimedSteps;
use crate::engine::clock::Phases;
use crate::engine::config::TrainConfig;
use crate::engine::evaluation::Evaluation;
use crate::engine::tally::Window;
use crate::engine::worker::FromWorker;
use crate::engine::EngineError;
use crate::flops::PeakFlops;
use crate::record::{EpochStats, FinishReason, Summary};
use dpt_core::device::DeviceId;
use dpt_core::tally::Tally;

mod closing;
mod done;
mod seen;
mod step_clock;

use closing::Closed;
pub(super) use closing::{Report, WindowEnd};
pub(super) use done::Done;
use step_clock::StepClock;
pub(super) use seen::Straggler;
use seen::{Rates, Stragglers};

pub(super) struct Reporter {
    window: Window,
    epoch: Window,
    done: Done,
    /// Replicas in the whole run.
    replicas: usize,
    /// The replicas already named as stragglers.
    stragglers: Stragglers,
    /// Times the allreduce and the update.
    clock: StepClock,
    /// The timed steps not yet complete (see `timed.rs`).
    timed: TimedSteps,
    /// Over the report window's steps whose norm was taken, `[the mean gradient's norm summed,
    /// the norms counted]` (on the device).
    grad_norms: Option<tch::Tensor>,
    /// The train loss of the last report.
    last_loss: Option<f64>,
    /// The model's FLOPs and what the run's GPUs can do at most.
    rates: Rates,
    /// With `DPT_SYNC_DEBUG`, the synchronizing CUDA calls counted so far.
    syncs: Option<crate::device::sync_debug::SyncTally>,
    /// Whether a window is reported when the next one closes (see `closing.rs`).
    later: bool,
    /// The window closed and not reported yet.
    closed: Option<Closed>,
}

impl Reporter {
    /// Before the first step, for `replicas` replicas in all, `local` of them in this process
    /// (the first on `device`).
    pub(super) fn new(replicas: usize, local: usize, device: DeviceId, peak: Option<PeakFlops>) -> Reporter {
        Reporter {
            window: Window::new(replicas),
            epoch: Window::new(replicas),
            done: Done::default(),
            replicas,
            stragglers: Stragglers::default(),
            clock: StepClock::new(device),
            timed: TimedSteps::new(local),
            grad_norms: None,
            last_loss: None,
            rates: Rates::new(peak),
            syncs: None,
            later: false,
            closed: None,
        }
    }

    /// Reports each window when the next one closes (or the loop flushes) when `on`: its
    /// device figures are then read without waiting for the device.
    pub(super) fn reporting_later(mut self, on: bool) -> Reporter {
        self.later = on;
        self
    }

    /// Counts the synchronizing CUDA calls per report window when `on`.
    pub(super) fn counting_syncs(mut self, on: bool) -> Reporter {
        self.syncs = on.then(crate::device::sync_debug::SyncTally::start).and_then(Result::ok);
        self
    }

    /// Times the steps' phases on `device` (the first replica's) from now on.
    pub(super) fn start_clock(&mut self, device: tch::Device) {
        self.clock.start(device);
    }

    /// How steps are timed, as the start record says it.
    pub(super) fn timing(&self) -> String {
        self.clock.describe()
    }

    /// The coordinator's part of step `step` begins (`timed`: one whose phases are measured).
    pub(super) fn begin_phases(&mut self, timed: bool, step: usize) -> Result<(), EngineError> {
        self.clock.begin(timed, step)
    }

    /// Ends one of the coordinator's phases (the allreduce, the update).
    pub(super) fn end_phase(&mut self) -> Result<(), EngineError> {
        self.clock.mark()
    }

    /// Ends the coordinator's part of the step that makes `now` steps and counts it, with
    /// this process's first replica at `offset` among all.
    pub(super) fn end_step(&mut self, offset: usize, now: usize) -> Result<(), EngineError> {
        let phases = self.clock.finish()?;
        self.count_step(phases, offset, now);
        Ok(())
    }

    /// Takes a step's replies: each replica's timing of a timed step (this one or an earlier
    /// one, see `timed.rs`) and its loader's figures. Returns the images that did not decode.
    pub(super) fn take_replies(&mut self, replies: Vec<FromWorker>) -> Vec<String> {
        let mut bad = Vec::new();
        for reply in replies {
            if let FromWorker::StepDone { replica, timing, bad: b, loader, flops, .. } = reply {
                bad.extend(b);
                self.rates.counted(flops);
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
    fn count_step(&mut self, phases: Option<Phases>, offset: usize, now: usize) {
        let w = &mut self.window;
        w.steps += 1;
        if let Some(p) = phases {
            self.timed.coordinator(p);
        }
        for step in self.timed.complete(now) {
            w.add_timed(offset, &step.replicas, &step.phases);
        }
    }

    /// Buckets whose sum overlapped a backward pass, of those that could.
    pub(super) fn add_overlap(&mut self, (early, buckets): (usize, usize)) {
        self.window.buckets.0 += early;
        self.window.buckets.1 += buckets;
    }

    /// Time the loop waited (paused or held), which is no training time.
    pub(super) fn paused(&mut self, idle: std::time::Duration) {
        self.window.paused += idle;
        self.epoch.paused += idle;
    }

    /// Adds a step's gradient norm, `[norm, counted]` (on the device; read once per report).
    pub(super) fn add_grad_norm(&mut self, norm: &tch::Tensor) {
        let _ =
            self.grad_norms.get_or_insert_with(|| norm.zeros_like().to_kind(tch::Kind::Double)).g_add_(norm);
    }

    /// An epoch begins, continuing `partial` (a resumed or rewound epoch's figures so far).
    pub(super) fn begin_epoch(&mut self, partial: Option<Tally>) {
        debug_assert!(self.closed.is_none(), "a window is reported before its epoch ends");
        self.epoch = match partial {
            Some(p) => Window::resuming(self.replicas, p),
            None => Window::new(self.replicas),
        };
        self.window = Window::new(self.replicas);
    }

    /// Whether the report window holds steps not reported yet.
    pub(super) fn window_open(&self) -> bool {
        self.window.steps > 0
    }

    /// The epoch's training figures so far (every closed window reported: see
    /// [`Reporter::flush`]).
    pub(super) fn epoch_so_far(&self) -> Tally {
        debug_assert!(self.closed.is_none(), "the epoch's figures are read with a window unreported");
        self.epoch.now()
    }

    /// The train loss of the last report (made: see [`Reporter::flush`]).
    pub(super) fn last_loss(&self) -> Option<f64> {
        debug_assert!(self.closed.is_none(), "the last loss is read with a window unreported");
        self.last_loss
    }

    /// Ends epoch `epoch` (0-based), whose training figures were `train` when its evaluation
    /// began ([`Reporter::epoch_so_far`]: the evaluation's time is not training time), with that
    /// evaluation (and the moving average's, `ema`), which took `eval_seconds`: counted as done,
    /// its record made. `classes`: 0 for a run judged by its loss alone.
    pub(super) fn end_epoch(
        &mut self,
        at: (usize, f64, f64),
        train: Tally,
        evaluated: (&Evaluation, Option<Tally>),
        classes: usize,
    ) -> EpochStats {
        self.done.end_epoch(at, train, evaluated, classes)
    }

    /// The final test's accuracy becomes the last one; the validation accuracy it replaces.
    pub(super) fn tested(&mut self, acc: f64) -> Option<f64> {
        self.done.tested(acc)
    }

    /// The finished epochs' counters (a checkpoint's, the summary's).
    pub(super) fn done(&self) -> Done {
        self.done
    }

    /// Continues from a checkpoint's counters.
    pub(super) fn restore(&mut self, done: Done) {
        self.done = done;
    }

    /// The run's summary: it ended for `reason` at `global_steps` steps, in the middle of an
    /// epoch when `partial` (which counts for throughput).
    pub(super) fn summary(
        &self,
        cfg: &TrainConfig,
        (reason, partial, global_steps): (FinishReason, bool, usize),
        classes: usize,
    ) -> Summary {
        let unfinished = partial.then(|| self.epoch.now());
        self.done.summary(cfg, (reason, unfinished, global_steps), classes, &self.rates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(replica: usize, timing: Option<(usize, f64, f64)>, bad: &[&str]) -> FromWorker {
        let bad = bad.iter().map(|b| (*b).to_owned()).collect();
        let timing = timing.map(|(step, data, compute)| Phases { step, seconds: vec![data, compute] });
        FromWorker::StepDone { replica, timing, bad, loader: None, flops: None, uncaptured: None }
    }

    #[test]
    fn replies_fill_their_global_slots_and_a_step_counts_its_slowest_replica() {
        // This process holds replicas 2 and 3 of 4.
        let mut r = Reporter::new(4, 2, DeviceId::Cpu, None);
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
        let mut r = Reporter::new(2, 2, DeviceId::Cpu, None);
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
        let mut r = Reporter::new(4, 4, DeviceId::Cpu, None);
        let times = [0.1, 0.1, 0.1, 0.5];
        let new = r.stragglers.new_ones(&times);
        assert_eq!(new, vec![Straggler { replica: 3, step_ms: 500.0, median_ms: 100.0 }]);
        assert_eq!(r.stragglers.new_ones(&times), vec![], "named before");
    }

    fn end(skipped: usize, loss_scale: Option<f64>) -> WindowEnd<'static> {
        WindowEnd {
            at: (1, 4, 10),
            global_step: 4,
            lr: 0.1,
            scaler: loss_scale.map(|scale| tch::Tensor::from_slice(&[scale, skipped as f64])),
            loader: (2, 1),
            world: None,
        }
    }

    fn sums(loss: f64, correct: f64, samples: f64) -> Vec<crate::engine::worker::WindowSums> {
        let values = crate::device::late_read::LateRead::start(&tch::Tensor::from_slice(&[loss, correct])).unwrap();
        vec![crate::engine::worker::WindowSums { values, samples }]
    }

    fn wait() -> crate::device::gpu_wait::Waiting {
        crate::engine::clock::waiting("a test", "cpu", std::time::Duration::from_secs(1))
    }

    /// Four steps (two of them skipped) and their figures, then the window's close.
    fn four_steps(r: &mut Reporter, loss: f64, scale: Option<f64>) -> Option<Report> {
        for _ in 0..4 {
            r.take_replies(vec![done(0, None, &[])]);
            r.count_step(None, 0, 0);
        }
        // Two norms counted of four steps (the others not taken or skipped).
        r.add_grad_norm(&tch::Tensor::from_slice(&[3.0f32, 1.0]));
        r.add_grad_norm(&tch::Tensor::from_slice(&[1.0f32, 1.0]));
        r.add_grad_norm(&tch::Tensor::from_slice(&[0.0f32, 0.0]));
        assert!(r.window_open());
        let due = r.close_window(&end(2, scale), sums(loss, 3.0, 4.0), &wait()).unwrap();
        assert!(!r.window_open(), "a new window");
        due
    }

    #[test]
    fn a_window_closes_into_its_step_record_with_the_mean_norm_of_the_steps_not_skipped() {
        let mut r = Reporter::new(1, 1, DeviceId::Cpu, None);
        r.begin_epoch(None);
        let (stats, stragglers) = four_steps(&mut r, 8.0, Some(1024.0)).expect("reported at once");
        assert!(stragglers.is_empty(), "no timed step: no comparison");
        assert_eq!((stats.loss, stats.acc, stats.global_step), (2.0, 0.75, 4));
        assert_eq!(stats.grad_norm, Some(2.0), "the mean of the norms counted");
        assert_eq!((stats.loss_scale, stats.skipped_steps), (Some(1024.0), Some(2)));
        assert_eq!(r.last_loss(), Some(2.0));
        assert_eq!(r.epoch_so_far().samples, 4.0, "the epoch has the window's figures");
        let (unscaled, _) = r.close_window(&end(0, None), Vec::new(), &wait()).unwrap().unwrap();
        assert_eq!((unscaled.loss_scale, unscaled.skipped_steps, unscaled.grad_norm), (None, None, None));
    }

    #[test]
    fn a_window_reported_later_is_the_window_reported_at_once() {
        let (mut now, mut later) =
            (Reporter::new(1, 1, DeviceId::Cpu, None), Reporter::new(1, 1, DeviceId::Cpu, None).reporting_later(true));
        now.begin_epoch(None);
        later.begin_epoch(None);
        let first = four_steps(&mut now, 8.0, None).unwrap().0;
        assert!(four_steps(&mut later, 8.0, None).is_none(), "the first window waits for the next close");
        let second = four_steps(&mut now, 4.0, None).unwrap().0;
        let first_later = four_steps(&mut later, 4.0, None).expect("the next close reports it").0;
        let second_later = later.flush(None, &wait()).unwrap().expect("a flush reports the last").0;
        assert!(later.flush(None, &wait()).unwrap().is_none(), "each window once");
        for (a, b) in [(&first, &first_later), (&second, &second_later)] {
            assert_eq!((a.loss, a.acc, a.grad_norm, a.global_step), (b.loss, b.acc, b.grad_norm, b.global_step));
        }
        assert_eq!((first.loss, second.loss), (2.0, 1.0));
        assert_eq!((now.last_loss(), now.epoch_so_far().samples), (later.last_loss(), later.epoch_so_far().samples));
    }

    #[test]
    fn an_epoch_end_counts_as_done_and_a_restore_continues_the_counts() {
        let mut r = Reporter::new(1, 1, DeviceId::Cpu, None);
        r.begin_epoch(Some(Tally { loss: 1.0, correct: 1.0, samples: 2.0, seconds: 3.0 }));
        let mut evaluation = Evaluation::new(2);
        evaluation.add(
            Tally { loss: 1.0, correct: 1.0, samples: 2.0, seconds: 0.0 },
            2.0,
            &[1.0, 0.0, 1.0, 0.0],
        );
        let train = r.epoch_so_far();
        let stats = r.end_epoch((0, 0.1, 0.5), train, (&evaluation, None), 2);
        assert_eq!((stats.epoch, stats.test_acc, stats.train_loss), (1, 0.5, 0.5));
        assert!(stats.epoch_seconds >= 3.0, "the resumed epoch's seconds count");
        assert_eq!(
            stats.epoch_seconds, train.seconds,
            "the time when the evaluation began: it is not training"
        );
        let done = r.done();
        assert_eq!((done.epochs, done.last_test_acc, done.tally.samples), (1, Some(0.5), 2.0));
        assert_eq!(r.tested(0.9), Some(0.5), "the final test replaces the validation accuracy");
        let mut resumed = Reporter::new(1, 1, DeviceId::Cpu, None);
        resumed.restore(done);
        assert_eq!(resumed.done(), done);
        let by_loss = r.end_epoch((1, 0.1, 0.5), r.epoch_so_far(), (&evaluation, None), 0);
        assert_eq!((r.done().epochs, r.done().last_test_acc), (2, None), "no classes: judged by the loss");
        assert_eq!(by_loss.test_loss, 0.5);
    }
}
