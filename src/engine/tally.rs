//! Training figures gathered over time: a [`Window`] sums the workers' [`Tally`]s (loss,
//! correct predictions, samples and seconds; the type is the protocol's, since a checkpoint
//! stores the epoch in progress as one) per report window and per epoch, and adds the clock and
//! the step timings.

use std::time::{Duration, Instant};

use crate::dist::{DistError, World};
use crate::input::loader::LoaderTally;
use crate::record::{ReplicaTiming, StepStats, StepTiming};
use dpt_core::tally::Tally;
use dpt_sys::c10d::ReduceOp;

/// A tally being gathered since a point in time (a report window, an epoch), with its step
/// timings; pauses do not count as training time.
#[derive(Debug, Clone)]
pub struct Window {
    /// Figures so far; `seconds` holds time carried over from before (a resumed epoch's part).
    pub tally: Tally,
    pub steps: usize,
    /// Steps skipped because their scaled gradient overflowed (`--loss-scale`).
    pub skipped: usize,
    /// Steps whose phases were timed (every one on the CPU; a sample on GPUs).
    pub timed: usize,
    /// Phase seconds summed over the timed steps.
    pub timing: StepTiming,
    pub replicas: Vec<ReplicaTiming>,
    /// The streaming loader's figures over the window.
    pub loader: LoaderTally,
    /// Gradient buckets reduced over the window: those started during a backward pass, and all.
    pub buckets: (usize, usize),
    started: Instant,
    /// When the window closed (its clock stopped), if it has.
    closed: Option<Instant>,
    pub paused: Duration,
}

impl Window {
    pub fn new(replicas: usize) -> Self {
        Window {
            tally: Tally::default(),
            steps: 0,
            skipped: 0,
            timed: 0,
            timing: StepTiming::default(),
            replicas: vec![ReplicaTiming::default(); replicas],
            loader: LoaderTally::default(),
            buckets: (0, 0),
            started: Instant::now(),
            closed: None,
            paused: Duration::ZERO,
        }
    }

    /// A window that continues a tally saved earlier (its seconds included).
    pub fn resuming(replicas: usize, saved: Tally) -> Self {
        Window { tally: saved, ..Window::new(replicas) }
    }

    /// Training seconds so far (up to the close, once closed).
    pub fn seconds(&self) -> f64 {
        let end = self.closed.unwrap_or_else(Instant::now);
        self.tally.seconds + end.saturating_duration_since(self.started).saturating_sub(self.paused).as_secs_f64()
    }

    /// Stops the window's clock: its seconds are those up to now, however late it is reported.
    pub fn close(&mut self) {
        self.closed.get_or_insert_with(Instant::now);
    }

    /// The tally with the seconds up to now.
    pub fn now(&self) -> Tally {
        Tally { seconds: self.seconds(), ..self.tally }
    }

    /// Adds figures (without time: the window's clock counts that).
    pub fn add(&mut self, t: Tally) {
        self.tally.add(Tally { seconds: 0.0, ..t });
    }

    /// Adds a timed step: each of this process's replicas' (input wait, compute) in its global
    /// slot (`offset`: this process's first replica), the slowest replica's in the step's
    /// timing, and the coordinator's `phases` (the allreduce the backward passes did not hide,
    /// the update).
    pub fn add_timed(&mut self, offset: usize, replicas: &[(f64, f64)], phases: &[f64]) {
        self.timed += 1;
        for (r, &(data, compute)) in replicas.iter().enumerate() {
            let slot = &mut self.replicas[offset + r];
            slot.data += data;
            slot.compute += compute;
        }
        self.timing.data += replicas.iter().map(|r| r.0).fold(0.0, f64::max);
        self.timing.compute += replicas.iter().map(|r| r.1).fold(0.0, f64::max);
        self.timing.allreduce += phases.first().copied().unwrap_or(0.0);
        self.timing.update += phases.get(1).copied().unwrap_or(0.0);
    }

    /// Makes the window global: training figures summed over the ranks, each replica's
    /// timings gathered (each rank fills its own replicas' slots), step phases at their slowest.
    pub fn sum_over_ranks(&mut self, world: &World) -> Result<(), DistError> {
    let mut sums = [self.tally.loss, self.tally.correct, self.tally.samples];
    world.allreduce_values(&mut sums, ReduceOp::Sum)?;
    [self.tally.loss, self.tally.correct, self.tally.samples] = sums;
    let mut replicas: Vec<f64> = self.replicas.iter().flat_map(|r| [r.data, r.compute]).collect();
    world.allreduce_values(&mut replicas, ReduceOp::Sum)?;
    for (r, pair) in self.replicas.iter_mut().zip(replicas.chunks(2)) {
        (r.data, r.compute) = (pair[0], pair[1]);
    }
    let t = &mut self.timing;
    let mut phases = [t.data, t.compute, t.allreduce, t.update];
    world.allreduce_values(&mut phases, ReduceOp::Max)?;
    (t.data, t.compute, t.allreduce, t.update) = (phases[0], phases[1], phases[2], phases[3]);
    Ok(())
    }


    /// The report of this window, timings as averages over its timed steps.
    pub fn stats(
        &self,
        epoch: usize,
        step: usize,
        steps_per_epoch: usize,
        global_step: usize,
        lr: f64,
    ) -> StepStats {
        let n = self.timed.max(1) as f64;
        let per = |x: f64| x / n;
        let now = self.now();
        StepStats {
            epoch,
            step,
            steps_per_epoch,
            global_step,
            loss: now.mean_loss(),
            acc: now.accuracy(),
            lr,
            samples_per_sec: now.throughput(),
            timing: StepTiming {
                data: per(self.timing.data),
                compute: per(self.timing.compute),
                allreduce: per(self.timing.allreduce),
                update: per(self.timing.update),
            },
            replicas: self
                .replicas
                .iter()
                .map(|r| ReplicaTiming { data: per(r.data), compute: per(r.compute) })
                .collect(),
            grad_norm: None,
            loss_scale: None,
            skipped_steps: None,
            timed_steps: Some(self.timed),
            loader: None,
            overlapped: (self.buckets.1 > 0).then(|| self.buckets.0 as f64 / self.buckets.1 as f64),
            bottleneck: None,
            model_flops: None,
            mfu: None,
            cuda_syncs: None,
            scalars: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_add_and_average() {
        let mut t = Tally { loss: 2.0, correct: 1.0, samples: 4.0, seconds: 1.0 };
        t.add(Tally { loss: 2.0, correct: 3.0, samples: 4.0, seconds: 1.0 });
        assert_eq!((t.mean_loss(), t.accuracy(), t.throughput()), (0.5, 0.5, 4.0));
        assert_eq!(Tally::default().mean_loss(), 0.0);
        let mut w = Window::resuming(2, Tally { seconds: 5.0, ..Tally::default() });
        assert!(w.seconds() >= 5.0);
        w.close();
        let closed = w.seconds();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.seconds(), closed, "a closed window's clock has stopped");
    }
}
