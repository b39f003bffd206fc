//! Timed steps put together from their parts. A sampled step is timed by each local replica
//! (input wait, forward/backward) and by the coordinator (the allreduce the backward passes did
//! not hide, the update); on a GPU each part is read when a later step finds its events passed
//! (`engine::clock`), so the parts of one step arrive at different later steps. A step enters
//! the report window once every part is in, so the window's shares and the straggler check
//! always compare the same steps.

use std::collections::BTreeMap;

use crate::engine::clock::{Phases, GPU_SAMPLE_EVERY};

/// A timed step with every part in: each local replica's (input wait, compute) and the
/// coordinator's phases, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TimedStep {
    pub(super) replicas: Vec<(f64, f64)>,
    pub(super) phases: Vec<f64>,
}

#[derive(Default)]
struct Parts {
    replicas: Vec<Option<(f64, f64)>>,
    phases: Option<Vec<f64>>,
}

/// The parts of the timed steps not yet complete, by step.
pub(super) struct TimedSteps {
    local: usize,
    parts: BTreeMap<usize, Parts>,
}

/// A step whose parts are still missing this many steps later is dropped: a part that never
/// comes (a replica whose events were still taken by an earlier step timed nothing).
const STALE_AFTER: usize = 2 * GPU_SAMPLE_EVERY;

impl TimedSteps {
    /// For `local` replicas in this process.
    pub(super) fn new(local: usize) -> TimedSteps {
        TimedSteps { local, parts: BTreeMap::new() }
    }

    fn at(&mut self, step: usize) -> &mut Parts {
        let local = self.local;
        self.parts.entry(step).or_insert_with(|| Parts { replicas: vec![None; local], phases: None })
    }

    /// Local replica `replica`'s part: its input wait and compute.
    pub(super) fn replica(&mut self, replica: usize, p: &Phases) {
        let (data, compute) =
            (p.seconds.first().copied().unwrap_or(0.0), p.seconds.get(1).copied().unwrap_or(0.0));
        if let Some(slot) = self.at(p.step).replicas.get_mut(replica) {
            *slot = Some((data, compute));
        }
    }

    /// The coordinator's part.
    pub(super) fn coordinator(&mut self, p: Phases) {
        self.at(p.step).phases = Some(p.seconds);
    }

    /// The steps now complete, oldest first, taken out; the ones stale at step `now` dropped.
    pub(super) fn complete(&mut self, now: usize) -> Vec<TimedStep> {
        let mut done = Vec::new();
        self.parts.retain(|&step, parts| {
            if let (Some(replicas), Some(phases)) =
                (parts.replicas.iter().copied().collect::<Option<Vec<_>>>(), parts.phases.as_ref())
            {
                done.push(TimedStep { replicas, phases: phases.clone() });
                return false;
            }
            step + STALE_AFTER > now
        });
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(step: usize, seconds: &[f64]) -> Phases {
        Phases { step, seconds: seconds.to_vec() }
    }

    #[test]
    fn a_step_is_complete_once_every_replica_and_the_coordinator_timed_it() {
        let mut t = TimedSteps::new(2);
        // Step 13's parts come at the ends of steps 13, 14 and 15, in any order.
        t.replica(1, &p(13, &[0.002, 0.030]));
        t.coordinator(p(13, &[0.010, 0.001]));
        assert_eq!(t.complete(14), vec![], "replica 0 has not timed step 13 yet");
        t.replica(0, &p(13, &[0.001, 0.020]));
        assert_eq!(
            t.complete(15),
            vec![TimedStep { replicas: vec![(0.001, 0.020), (0.002, 0.030)], phases: vec![0.010, 0.001] }]
        );
        assert_eq!(t.complete(16), vec![], "taken once");
    }

    #[test]
    fn a_step_missing_a_part_for_long_is_dropped() {
        let mut t = TimedSteps::new(2);
        t.replica(0, &p(3, &[0.0, 0.1]));
        t.coordinator(p(3, &[0.0, 0.0]));
        assert!(t.complete(3 + STALE_AFTER - 1).is_empty());
        assert_eq!(t.parts.len(), 1);
        assert!(t.complete(3 + STALE_AFTER).is_empty());
        assert!(t.parts.is_empty(), "dropped");
        // A late part of it starts nothing that completes.
        t.replica(1, &p(3, &[0.0, 0.1]));
        assert!(t.complete(40).is_empty());
        assert!(t.parts.is_empty());
    }
}
