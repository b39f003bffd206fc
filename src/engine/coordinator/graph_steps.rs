//! Which of its steps each replica runs eagerly, captures or replays (`--cuda-graphs`). A
//! replica warms up eagerly on batches of one size for [`WARM_UP_STEPS`], then captures that
//! size and replays it for every later batch of it; a batch of another size (the epoch's last,
//! partial one; a shard one sample shorter) runs eagerly, and the next batch of the captured
//! size replays again. A replica whose capture failed runs eagerly from then on, said once.
//! Every replica of the process decides alike on the same steps, since their shard sizes change
//! together, so their captures fall on one step, taken one at a time by the workers.

use dpt_core::settings::cuda_graphs::{Eager, WARM_UP_STEPS};

use crate::engine::worker::StepGraph;
use crate::record::Change;

/// One replica's way through its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replica {
    /// `steps` eager steps in a row on shards of `len` samples.
    Warming { len: usize, steps: usize },
    /// Its graph holds shards of `len` samples.
    Captured { len: usize },
    /// Its capture failed.
    Failed,
}

/// The replicas' graphs, as the coordinator asks for them.
pub(super) struct GraphSteps {
    /// Why the run is eager (`None`: it graphs).
    why: Option<Eager>,
    replicas: Vec<Replica>,
}

impl GraphSteps {
    /// The plan of a run of `replicas` in this process, eager for `why` (`None`: graphed).
    pub(super) fn new(why: Option<Eager>, replicas: usize) -> GraphSteps {
        GraphSteps { why, replicas: vec![Replica::Warming { len: 0, steps: 0 }; replicas] }
    }

    /// What replica `r` does with its shard of `len` samples this step.
    pub(super) fn next(&mut self, r: usize, len: usize) -> StepGraph {
        if self.why.is_some() || len == 0 {
            return StepGraph::Eager;
        }
        let state = &mut self.replicas[r];
        let (now, ask) = match *state {
            Replica::Failed => (Replica::Failed, StepGraph::Eager),
            Replica::Captured { len: held } if held == len => (*state, StepGraph::Replay),
            Replica::Captured { .. } => (*state, StepGraph::Eager),
            Replica::Warming { len: l, steps } if l == len && steps >= WARM_UP_STEPS => {
                (Replica::Captured { len }, StepGraph::Capture)
            }
            Replica::Warming { len: l, steps } if l == len => (Replica::Warming { len, steps: steps + 1 }, StepGraph::Eager),
            Replica::Warming { .. } => (Replica::Warming { len, steps: 1 }, StepGraph::Eager),
        };
        *state = now;
        ask
    }

    /// Replica `r` (on `device`) could not capture, for `why`: it runs eagerly from now on; the
    /// warning to say.
    pub(super) fn failed(&mut self, r: usize, device: &str, why: &str) -> Change {
        self.replicas[r] = Replica::Failed;
        Change::Warning {
            message: format!(
                "replica {r} ({device}) could not capture its step as a CUDA graph and runs it eagerly: {why}"
            ),
        }
    }

    /// Replicas whose step is captured now.
    #[cfg(test)]
    fn captured(&self) -> usize {
        self.replicas.iter().filter(|r| matches!(r, Replica::Captured { .. })).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepGraph::{Capture, Eager as Run, Replay};

    fn steps(plan: &mut GraphSteps, r: usize, lens: &[usize]) -> Vec<StepGraph> {
        lens.iter().map(|&len| plan.next(r, len)).collect()
    }

    #[test]
    fn a_replica_warms_up_captures_and_replays_and_runs_other_shapes_eagerly() {
        let mut plan = GraphSteps::new(None, 1);
        let warm = vec![Run; WARM_UP_STEPS];
        assert_eq!(steps(&mut plan, 0, &[64; WARM_UP_STEPS]), warm);
        assert_eq!(steps(&mut plan, 0, &[64, 64]), [Capture, Replay]);
        // The epoch's last, partial batch, then full ones again; an empty shard.
        assert_eq!(steps(&mut plan, 0, &[17, 64, 0, 64]), [Run, Replay, Run, Replay]);
        assert_eq!(plan.captured(), 1);
    }

    #[test]
    fn a_change_of_size_during_the_warm_up_starts_it_again() {
        let mut plan = GraphSteps::new(None, 1);
        let mut lens = vec![64; WARM_UP_STEPS - 1];
        lens.push(17);
        lens.extend(vec![64; WARM_UP_STEPS]);
        assert!(steps(&mut plan, 0, &lens).iter().all(|s| *s == Run));
        assert_eq!(plan.next(0, 64), Capture);
    }

    #[test]
    fn replicas_with_shards_of_different_sizes_capture_on_the_same_step() {
        let mut plan = GraphSteps::new(None, 2);
        for _ in 0..WARM_UP_STEPS {
            assert_eq!([plan.next(0, 86), plan.next(1, 85)], [Run, Run]);
        }
        assert_eq!([plan.next(0, 86), plan.next(1, 85)], [Capture, Capture]);
        assert_eq!([plan.next(0, 86), plan.next(1, 85)], [Replay, Replay]);
    }

    #[test]
    fn a_replica_that_could_not_capture_runs_eagerly_and_the_others_go_on() {
        let mut plan = GraphSteps::new(None, 2);
        for _ in 0..=WARM_UP_STEPS {
            plan.next(0, 32);
            plan.next(1, 32);
        }
        let Change::Warning { message } = plan.failed(1, "cuda:0", "operation not permitted when stream is capturing")
        else {
            panic!("a warning");
        };
        assert!(message.contains("replica 1 (cuda:0)") && message.contains("not permitted"), "{message}");
        assert_eq!(steps(&mut plan, 1, &[32; 6]), [Run; 6]);
        assert_eq!(plan.next(0, 32), Replay);
    }

    #[test]
    fn an_eager_run_never_captures() {
        let mut plan = GraphSteps::new(Some(Eager::CpuReplica), 1);
        assert!(steps(&mut plan, 0, &[64; 20]).iter().all(|s| *s == Run));
    }
}
