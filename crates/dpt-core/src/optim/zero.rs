//! `optimizer.zero`: how much of the update's memory is split over the replicas, by ZeRO's
//! stages (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion
//! Parameter Models"), with the names DeepSpeed gives them.
//!
//! Stage 1 splits the optimizer state: replica `i` of `n` holds the state of one contiguous
//! shard of the flat parameters ([`Zero::shard`]), updates that shard from the summed gradient,
//! and the updated shards are then copied into every replica (an all-gather). The gradients
//! are still summed into every replica, so the communication is the allreduce's, and the update
//! is the same elementwise arithmetic on the same values: a sharded run ends with the weights
//! of the unsharded one, bit for bit.

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

    /// The range `[start, end)` of a flat buffer of `total` elements whose optimizer state
    /// replica `i` of `n` holds: the whole buffer unsharded, else its `i`-th of `n` near-equal
    /// contiguous parts (the first `total % n` one element longer).
    pub fn shard(self, total: i64, i: usize, n: usize) -> (i64, i64) {
        if !self.shards_states() || n <= 1 {
            return (0, total);
        }
        let (n, i) = (n as i64, i as i64);
        let (base, extra) = (total / n, total % n);
        let start = i * base + i.min(extra);
        (start, start + base + i64::from(i < extra))
    }

    /// The share of the whole optimizer state one of `n` replicas holds (its largest shard's).
    pub fn state_share(self, total: i64, n: usize) -> i64 {
        let (start, end) = self.shard(total, 0, n);
        end - start
    }

    /// Refuses the stage for a run of `replicas` replicas in all, in one line.
    pub fn check(self, replicas: usize, processes: usize) -> Result<(), String> {
        if !self.shards_states() {
            return Ok(());
        }
        if processes > 1 {
            return Err(format!(
                "--zero 1 splits the optimizer state over the replicas of one process so far, and this run has {processes} processes; run the replicas in one process (--devices cuda:0,cuda:1 or cpu:N) or leave --zero out"
            ));
        }
        if replicas < 2 {
            return Err("--zero 1 splits the optimizer state over the replicas, and this run has one; give it two devices or more (--devices cpu:2, cuda:0,cuda:1) or leave --zero out".into());
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
            for i in 0..n {
                let (start, end) = Zero::States.shard(total, i, n);
                assert_eq!(start, next, "{total} over {n}: shard {i} starts where {} ended", i.max(1) - 1);
                assert!(end - start >= total / n as i64 && end - start <= total / n as i64 + 1);
                next = end;
            }
            assert_eq!(next, total);
        }
        assert_eq!(Zero::Off.shard(10, 1, 3), (0, 10), "unsharded: the whole buffer");
        assert_eq!(Zero::States.state_share(10, 3), 4);
    }

    #[test]
    fn the_stage_is_read_as_a_number_and_refused_where_it_cannot_split() {
        assert_eq!("1".parse(), Ok(Zero::States));
        assert_eq!("off".parse(), Ok(Zero::Off));
        assert!("2".parse::<Zero>().unwrap_err().contains("use 0 or 1"));
        assert!(Zero::States.check(1, 1).unwrap_err().contains("has one"));
        assert!(Zero::States.check(4, 2).unwrap_err().contains("2 processes"));
        assert_eq!(Zero::States.check(2, 1), Ok(()));
        assert_eq!(Zero::Off.check(1, 1), Ok(()));
    }
}
