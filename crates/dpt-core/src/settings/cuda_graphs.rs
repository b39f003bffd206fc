//! `--cuda-graphs`: whether each GPU replica captures its step's forward and backward passes
//! once as a CUDA graph and replays it, one launch instead of one per kernel, for the steps
//! whose batch has the captured shape. What keeps a run eager, and why, is decided here from
//! the run's facts, before it starts; the start record says it.

use serde::{Deserialize, Serialize};

/// The setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaGraphs {
    /// Graph where the run allows it, else run eagerly and say why.
    #[default]
    Auto,
    /// Graph, or refuse to start, saying why not.
    On,
    /// Always run eagerly.
    Off,
}

crate::names!(CudaGraphs, "CUDA graphs mode", { Auto => "auto", On => "on", Off => "off" });

/// The steps a replica runs eagerly, with the shape it graphs, before its capture: the first
/// step's one-time work (cuDNN's algorithm search, cuBLAS's workspace, the FLOP count, the
/// allocator's first blocks) is done by then, on the stream that captures.
pub const WARM_UP_STEPS: usize = 3;

/// What a run is, as far as graphing its replicas' steps goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphFacts {
    /// This dpt-tui was built against a libtorch with CUDA.
    pub cuda_build: bool,
    /// A replica of this process trains on the CPU.
    pub cpu_replica: bool,
    /// `--zero 2`.
    pub zero_2: bool,
    /// `--accumulate`.
    pub accumulate: usize,
    /// The gradient buckets' hooks reduce during the backward pass.
    pub buckets: bool,
    /// The model draws random numbers inside its forward pass (a TorchScript model's dropout).
    pub draws_inside: bool,
    /// The batches are streamed by loader threads.
    pub streamed: bool,
    /// Test faults that change a step are set.
    pub faults: bool,
}

/// Why a run's replicas run their steps eagerly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eager {
    Off,
    CpuReplica,
    NoCudaBuild,
    ZeroTwo,
    Accumulate(usize),
    Buckets,
    DrawsInside,
    Streamed,
    Faults,
}

impl std::fmt::Display for Eager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Eager::Off => f.write_str("--cuda-graphs off"),
            Eager::CpuReplica => f.write_str("a replica trains on the CPU"),
            Eager::NoCudaBuild => f.write_str("this dpt-tui was built without CUDA"),
            Eager::ZeroTwo => {
                f.write_str("--zero 2 picks each bucket's buffer on the host as the backward pass runs")
            }
            Eager::Accumulate(n) => write!(f, "--accumulate {n} runs {n} micro-batches a step"),
            Eager::Buckets => f.write_str(
                "the gradient buckets' hooks run on the host during the backward pass \
                 (--bucket-cap-mb 0 reduces after it and lets the replicas graph)",
            ),
            Eager::DrawsInside => {
                f.write_str("the model draws random numbers inside its forward pass (its dropout)")
            }
            Eager::Streamed => f.write_str(
                "the batches are streamed, and the loader's threads take page-locked memory while a \
                 replica would capture",
            ),
            Eager::Faults => f.write_str("test faults change the step"),
        }
    }
}

impl CudaGraphs {
    /// Whether a run with `facts` graphs its replicas' steps: `Ok(None)` it does, `Ok(Some(why))`
    /// it runs eagerly; under `on`, a run that cannot graph is refused with the reason.
    pub fn plan(self, facts: &GraphFacts) -> Result<Option<Eager>, String> {
        let why = match self {
            CudaGraphs::Off => Some(Eager::Off),
            CudaGraphs::Auto | CudaGraphs::On => Self::obstacle(facts),
        };
        match (self, why) {
            (CudaGraphs::On, Some(why)) => Err(format!(
                "--cuda-graphs on cannot graph this run: {why}; use --cuda-graphs auto to run it eagerly"
            )),
            (_, why) => Ok(why),
        }
    }

    /// The first fact that keeps a run eager, in the order a person would remove them.
    fn obstacle(f: &GraphFacts) -> Option<Eager> {
        [
            (f.cpu_replica, Eager::CpuReplica),
            (!f.cuda_build, Eager::NoCudaBuild),
            (f.zero_2, Eager::ZeroTwo),
            (f.accumulate > 1, Eager::Accumulate(f.accumulate)),
            (f.buckets, Eager::Buckets),
            (f.draws_inside, Eager::DrawsInside),
            (f.streamed, Eager::Streamed),
            (f.faults, Eager::Faults),
        ]
        .into_iter()
        .find_map(|(applies, why)| applies.then_some(why))
    }

    /// The start record's words for a run planned `why` (`None`: graphed); `one_replica`: the
    /// run has one replica in all, whose update is captured too.
    pub fn describe(why: Option<Eager>, one_replica: bool) -> String {
        match (why, one_replica) {
            (None, false) => format!(
                "graphed: each replica captures its forward and backward passes after {WARM_UP_STEPS} eager \
                 steps and replays them for batches of that shape (others run eagerly)"
            ),
            (None, true) => format!(
                "graphed: the replica captures its forward and backward passes after {WARM_UP_STEPS} eager \
                 steps and replays them for batches of that shape (others run eagerly); the update is \
                 captured too, and replayed every step"
            ),
            (Some(why), _) => format!("eager: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One GPU replica of a built-in model on resident data: nothing keeps it eager.
    fn clear() -> GraphFacts {
        GraphFacts { cuda_build: true, accumulate: 1, ..GraphFacts::default() }
    }

    #[test]
    fn a_run_with_nothing_in_the_way_graphs_under_auto_and_on_and_not_under_off() {
        assert_eq!(CudaGraphs::Auto.plan(&clear()), Ok(None));
        assert_eq!(CudaGraphs::On.plan(&clear()), Ok(None));
        assert_eq!(CudaGraphs::Off.plan(&clear()), Ok(Some(Eager::Off)));
        assert!(CudaGraphs::describe(None, false).starts_with("graphed: "));
        assert!(
            CudaGraphs::describe(None, true).ends_with("the update is captured too, and replayed every step")
        );
    }

    #[test]
    fn each_obstacle_keeps_the_run_eager_with_its_reason_and_on_refuses_it() {
        type Set = fn(&mut GraphFacts);
        let cases: [(Set, Eager); 8] = [
            (|f| f.cpu_replica = true, Eager::CpuReplica),
            (|f| f.cuda_build = false, Eager::NoCudaBuild),
            (|f| f.zero_2 = true, Eager::ZeroTwo),
            (|f| f.accumulate = 4, Eager::Accumulate(4)),
            (|f| f.buckets = true, Eager::Buckets),
            (|f| f.draws_inside = true, Eager::DrawsInside),
            (|f| f.streamed = true, Eager::Streamed),
            (|f| f.faults = true, Eager::Faults),
        ];
        for (set, why) in cases {
            let mut facts = clear();
            set(&mut facts);
            assert_eq!(CudaGraphs::Auto.plan(&facts), Ok(Some(why)));
            let refused = CudaGraphs::On.plan(&facts).expect_err("on refuses a run it cannot graph");
            assert!(
                refused.contains(&why.to_string()) && refused.contains("--cuda-graphs auto"),
                "{refused}"
            );
            assert_eq!(CudaGraphs::describe(Some(why), true), format!("eager: {why}"));
        }
        // A CPU run says so first, not that the build lacks CUDA.
        let cpu = GraphFacts { cpu_replica: true, buckets: true, ..GraphFacts::default() };
        assert_eq!(CudaGraphs::Auto.plan(&cpu), Ok(Some(Eager::CpuReplica)));
        assert!(Eager::Buckets.to_string().contains("--bucket-cap-mb 0"));
    }

    #[test]
    fn the_setting_reads_and_writes_its_three_words() {
        for mode in [CudaGraphs::Auto, CudaGraphs::On, CudaGraphs::Off] {
            assert_eq!(mode.name().parse::<CudaGraphs>(), Ok(mode));
        }
        let e = "always".parse::<CudaGraphs>().unwrap_err();
        assert!(e.contains("auto") && e.contains("off"), "{e}");
    }
}
