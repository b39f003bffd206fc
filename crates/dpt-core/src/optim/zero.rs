//! `optimizer.zero`: how much of the update's memory is split over the replicas, by ZeRO's
//! stages (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion
//! Parameter Models"), with the names DeepSpeed gives them.
//!
//! Stage 1 splits the optimizer state over every replica of the run, in all its processes:
//! replica `g` of the run's `all` holds the state of one contiguous shard of the flat parameters
//! ([`Zero::shard`], part `g` of the run's grid), updates that shard from the summed gradient,
//! and the updated shards are then copied into every other replica (an all-gather: within a
//! process by copies, across processes by a broadcast from each rank of its block). The
//! gradients are still summed into every replica, so the communication is the allreduce's plus
//! the weights' all-gather, and the update is the same elementwise arithmetic on the same
//! values: a sharded run ends with the weights of the unsharded one, bit for bit.
//!
//! The shards are the parts of the run's grid ([`Zero::grid`]): the flat buffer cut in as many
//! near-equal parts as the run has replicas. Every run cuts its update at that grid, sharded or
//! not, so the shards are updated in the very pieces an unsharded update takes.

use serde::{Deserialize, Serialize};

/// The ZeRO stage of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Zero {
    /// Every replica holds the whole optimizer state (data parallelism as DDP runs it).
    #[default]
    #[serde(rename = "0")]
    Off,
    /// Stage 1: each replica holds the optimizer state of its shard only.
    #[serde(rename = "1")]
    States,
}

crate::names!(Zero, "ZeRO stage", { Off => "0" | "off", States => "1" });

impl Zero {
    /// Whether the optimizer state is split over the replicas.
    pub fn shards_states(self) -> bool {
        self == Zero::States
    }

    /// Where part `g` of the grid of a flat buffer of `total` elements cut in `all` near-equal
    /// contiguous parts starts (the first `total % all` parts one element longer); part `all`
    /// starts at `total`.
    pub fn grid(total: i64, g: usize, all: usize) -> i64 {
        let (all, g) = (all.max(1) as i64, g as i64);
        let (base, extra) = (total / all, total % all);
        g * base + g.min(extra)
    }

    /// The range `[start, end)` of a flat buffer of `total` elements whose optimizer state
    /// replica `g` of the run's `all` holds: the whole buffer unsharded (or in a run of one
    /// replica), else part `g` of the grid.
    pub fn shard(self, total: i64, g: usize, all: usize) -> (i64, i64) {
        if !self.shards_states() || all <= 1 {
            return (0, total);
        }
        (Zero::grid(total, g, all), Zero::grid(total, g + 1, all))
    }

    /// Refuses the stage for a run of `all` replicas in all its processes, in one line.
    pub fn check(self, all: usize) -> Result<(), String> {
        if self.shards_states() && all < 2 {
            return Err("--zero 1 splits the optimizer state over the run's replicas, and this run has one; give it two devices or more (--devices cpu:2, cuda:0,cuda:1, or several processes) or leave --zero out".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_cover_the_buffer_once_in_order() {
        for (total, n) in [(10, 3), (9, 3), (2, 3), (0, 2), (129_068, 4)] {
            let mut next = 0;
            for g in 0..n {
                let (start, end) = Zero::States.shard(total, g, n);
                assert_eq!(start, next, "{total} over {n}: shard {g} starts where {} ended", g.max(1) - 1);
                assert!(end - start >= total / n as i64 && end - start <= total / n as i64 + 1);
                next = end;
            }
            assert_eq!(next, total);
        }
        assert_eq!(Zero::Off.shard(10, 1, 3), (0, 10), "unsharded: the whole buffer");
        assert_eq!(Zero::States.shard(10, 0, 1), (0, 10), "one replica: the whole buffer");
    }

    #[test]
    fn each_replica_of_the_run_holds_one_part_of_its_grid() {
        // 10 values over 4 replicas in all: the grid starts at 0, 3, 6, 8, whichever process
        // each replica is in.
        let grid: Vec<i64> = (0..=4).map(|g| Zero::grid(10, g, 4)).collect();
        assert_eq!(grid, [0, 3, 6, 8, 10]);
        let shards: Vec<(i64, i64)> = (0..4).map(|g| Zero::States.shard(10, g, 4)).collect();
        assert_eq!(shards, [(0, 3), (3, 6), (6, 8), (8, 10)]);
    }

    #[test]
    fn the_stage_is_read_as_a_number_and_refused_where_it_cannot_split() {
        assert_eq!("1".parse(), Ok(Zero::States));
        assert_eq!("off".parse(), Ok(Zero::Off));
        assert!("2".parse::<Zero>().unwrap_err().contains("use 0 or 1"));
        assert!(Zero::States.check(1).unwrap_err().contains("this run has one"));
        assert_eq!(Zero::States.check(2), Ok(()));
        assert_eq!(Zero::Off.check(1), Ok(()));
    }
}
