//! The whole run's step split, for the summary's verdict and `dpt-tui show RUN --why`: the
//! report windows' figures weighted by the steps each timed.

use crate::record::{LoaderStats, ReplicaTiming, StepStats, StepTiming};

/// Sums of the report windows' step figures, each weighted by its timed steps.
#[derive(Debug, Clone, Default)]
pub struct RunSplit {
    timed: f64,
    timing: StepTiming,
    replicas: Vec<ReplicaTiming>,
    /// Weighted sums of the loader's readiness and decode rate, the weight they add up to, and
    /// the depth and threads of the last window that had a loader.
    loader: (f64, f64, f64, Option<(usize, Option<usize>)>),
    overlapped: (f64, f64),
    last: Option<StepStats>,
}

impl RunSplit {
    /// Adds a report window (one without timed steps adds nothing; a record from before the
    /// count was kept weighs one).
    pub fn add(&mut self, s: &StepStats) {
        let n = s.timed_steps.unwrap_or(1) as f64;
        if n == 0.0 {
            return;
        }
        self.timed += n;
        let t = &mut self.timing;
        t.data += s.timing.data * n;
        t.compute += s.timing.compute * n;
        t.allreduce += s.timing.allreduce * n;
        t.update += s.timing.update * n;
        if self.replicas.len() != s.replicas.len() {
            // A restart on other devices: the run's replicas are the latest attempt's.
            self.replicas = vec![ReplicaTiming::default(); s.replicas.len()];
        }
        for (sum, r) in self.replicas.iter_mut().zip(&s.replicas) {
            sum.data += r.data * n;
            sum.compute += r.compute * n;
        }
        if let Some(l) = s.loader {
            self.loader.0 += l.ready * n;
            self.loader.1 += l.images_per_sec * n;
            self.loader.2 += n;
            self.loader.3 = Some((l.depth, l.threads));
        }
        if let Some(o) = s.overlapped {
            self.overlapped.0 += o * n;
            self.overlapped.1 += n;
        }
        self.last = Some(s.clone());
    }

    /// The run's step figures: the last window's, with each timing the mean over every timed
    /// step; `None` before a timed window.
    pub fn stats(&self) -> Option<StepStats> {
        let n = self.timed;
        let mut s = self.last.clone()?;
        let t = &self.timing;
        s.timing = StepTiming {
            data: t.data / n,
            compute: t.compute / n,
            allreduce: t.allreduce / n,
            update: t.update / n,
        };
        s.replicas = self
            .replicas
            .iter()
            .map(|r| ReplicaTiming { data: r.data / n, compute: r.compute / n })
            .collect();
        s.loader = self.loader.3.map(|(depth, threads)| LoaderStats {
            ready: self.loader.0 / self.loader.2,
            depth,
            images_per_sec: self.loader.1 / self.loader.2,
            threads,
        });
        s.overlapped = (self.overlapped.1 > 0.0).then(|| self.overlapped.0 / self.overlapped.1);
        s.timed_steps = Some(n as usize);
        Some(s)
    }
}
