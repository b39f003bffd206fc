//! Statistics gathered between two reports, or over an epoch.

use std::time::{Duration, Instant};

use super::events::{ReplicaTiming, StepStats, StepTiming};
use super::worker::Sums;

/// Sums and timings of the steps since a point in time, pauses excluded.
#[derive(Debug, Clone)]
pub struct Window {
    pub sums: Sums,
    pub steps: usize,
    pub timing: StepTiming,
    pub replicas: Vec<ReplicaTiming>,
    started: Instant,
    pub paused: Duration,
    /// Seconds counted before this window began (a resumed epoch's earlier part).
    pub carried_seconds: f64,
}

impl Window {
    pub fn new(replicas: usize) -> Self {
        Window {
            sums: Sums::default(),
            steps: 0,
            timing: StepTiming::default(),
            replicas: vec![ReplicaTiming::default(); replicas],
            started: Instant::now(),
            paused: Duration::ZERO,
            carried_seconds: 0.0,
        }
    }

    /// Training seconds so far.
    pub fn seconds(&self) -> f64 {
        self.carried_seconds + self.started.elapsed().saturating_sub(self.paused).as_secs_f64()
    }

    pub fn add(&mut self, s: Sums) {
        self.sums.add(s);
    }

    /// The report of this window, as per-step averages.
    pub fn stats(
        &self,
        epoch: usize,
        step: usize,
        steps_per_epoch: usize,
        global_step: usize,
        lr: f64,
    ) -> StepStats {
        let n = self.steps.max(1) as f64;
        let per = |x: f64| x / n;
        StepStats {
            epoch,
            step,
            steps_per_epoch,
            global_step,
            loss: self.sums.loss / self.sums.samples.max(1.0),
            acc: self.sums.correct / self.sums.samples.max(1.0),
            lr,
            samples_per_sec: self.sums.samples / self.seconds().max(1e-9),
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
        }
    }
}
