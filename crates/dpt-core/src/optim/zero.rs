//! `optimizer.zero`: how much of the update's memory is split over the replicas, by ZeRO's
//! stages (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion
//! Parameter Models"), with the names DeepSpeed gives them.
//!
//! Stage 1 splits the optimizer state over every replica of the run, in all its processes:
//! replica `g` of the run's `all` holds the state of one contiguous shard of the flat parameters
//! ([`Zero::shard`], part `g` of the run's [`ShardGrid`]), updates that shard from the summed gradient,
//! and the updated shards are then copied into every other replica (an all-gather: within a
//! process by copies, across processes by a broadcast from each rank of its block). The
//! gradients are still summed into every replica, so the communication is the allreduce's plus
//! the weights' all-gather, and the update is the same elementwise arithmetic on the same
//! values: a sharded run ends with the weights of the unsharded one, bit for bit.
//!
//! Stage 2 also splits the gradient sums: a replica's gradient buffer is its shard only. The
//! backward pass writes each bucket's gradients into a buffer of the bucket's size, kept only
//! until the bucket is summed; the bucket's sum is then reduced over the replicas to the owner of
//! each part of it (one reduce per owner, as DeepSpeed's stage 2 reduces a bucket's slices to
//! their owning ranks), half the bytes of an allreduce, and each replica keeps the part of its
//! shard. The weights' all-gather makes up the other half: the bytes are an allreduce's. The
//! sums are the same values summed in another order across processes (within float32 summation
//! order of the unsharded run's), and the gradient norm is summed from every shard's.
//!
//! The shards are the parts of the run's grid ([`ShardGrid`]): the flat buffer cut in as many
//! near-equal parts as the run has replicas. Every run cuts its update at that grid, sharded or
//! not, so the shards are updated in the very pieces an unsharded update takes.

use serde::{Deserialize, Serialize};

/// A contiguous part of a flat buffer: `len` elements from `start`. (Every part of a flat
/// buffer the shards, blocks, buckets and ranges name is one, so no pair of numbers has to say
/// whether its second is a length or an end.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: i64,
    pub len: i64,
}

impl Span {
    /// The span `[start, end)`.
    pub fn between(start: i64, end: i64) -> Span {
        Span { start, len: end - start }
    }

    /// Where it ends (exclusive).
    pub fn end(self) -> i64 {
        self.start + self.len
    }

    pub fn is_empty(self) -> bool {
        self.len <= 0
    }
}

/// The run's grid: a flat buffer of `total` elements cut in `parts` near-equal contiguous parts
/// (the first `total % parts` one element longer), one per replica of the run in all its
/// processes. Every run cuts its update at the grid, sharded or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardGrid {
    pub total: i64,
    pub parts: usize,
}

impl ShardGrid {
    pub fn new(total: i64, parts: usize) -> ShardGrid {
        ShardGrid { total, parts: parts.max(1) }
    }

    /// Where part `g` starts; part `parts` starts at `total`.
    fn at(self, g: usize) -> i64 {
        let (parts, g) = (self.parts as i64, g as i64);
        let (base, extra) = (self.total / parts, self.total % parts);
        g * base + g.min(extra)
    }

    /// Part `g`.
    pub fn part(self, g: usize) -> Span {
        self.parts_from(g, 1)
    }

    /// Parts `first .. first + count` together (a rank's replicas' parts, neighbours).
    pub fn parts_from(self, first: usize, count: usize) -> Span {
        Span::between(self.at(first), self.at(first + count))
    }

    /// The whole buffer.
    pub fn whole(self) -> Span {
        Span { start: 0, len: self.total }
    }

    /// Where the parts meet (the grid without its two ends).
    pub fn cuts(self) -> Vec<i64> {
        (1..self.parts).map(|g| self.at(g)).collect()
    }
}

/// The ZeRO stage of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub enum Zero {
    /// Every replica holds the whole optimizer state (data parallelism as DDP runs it).
    #[default]
    #[serde(rename = "0")]
    Off,
    /// Stage 1: each replica holds the optimizer state of its shard only.
    #[serde(rename = "1")]
    States,
    /// Stage 2: each replica holds the optimizer state and the gradient sums of its shard only.
    #[serde(rename = "2")]
    Gradients,
}

crate::names!(Zero, "ZeRO stage", { Off => "0" | "off", States => "1", Gradients => "2" });

impl Zero {
    /// Whether the optimizer state is split over the replicas (stages 1 and 2).
    pub fn shards_states(self) -> bool {
        self != Zero::Off
    }

    /// Whether the gradient sums are split over the replicas too (stage 2).
    pub fn shards_gradients(self) -> bool {
        self == Zero::Gradients
    }

    /// The span of the flat buffer whose optimizer state replica `g` of `grid` holds: the
    /// whole buffer unsharded (or in a run of one replica), else part `g` of the grid.
    pub fn shard(self, grid: ShardGrid, g: usize) -> Span {
        if !self.shards_states() || grid.parts <= 1 {
            return grid.whole();
        }
        grid.part(g)
    }

    /// The span of the flat buffer replica `g` of `grid` sums gradients into, where it holds a
    /// part only (stage 2 in a run of two replicas or more); none where it holds the whole.
    pub fn grad_shard(self, grid: ShardGrid, g: usize) -> Option<Span> {
        (self.shards_gradients() && grid.parts > 1).then(|| grid.part(g))
    }

    /// Refuses the stage for a run of `all` replicas in all its processes, in one line.
    pub fn check(self, all: usize) -> Result<(), String> {
        if self.shards_states() && all < 2 {
            let what = if self.shards_gradients() {
                "the gradients and the optimizer state"
            } else {
                "the optimizer state"
            };
            return Err(format!("--zero {self} splits {what} over the run's replicas, and this run has one; give it two devices or more (--devices cpu:2, cuda:0,cuda:1, or several processes) or leave --zero out"));
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
            let grid = ShardGrid::new(total, n);
            let mut next = 0;
            for g in 0..n {
                let shard = Zero::States.shard(grid, g);
                assert_eq!(
                    shard.start,
                    next,
                    "{total} over {n}: shard {g} starts where {} ended",
                    g.max(1) - 1
                );
                assert!(shard.len >= total / n as i64 && shard.len <= total / n as i64 + 1);
                next = shard.end();
            }
            assert_eq!(next, total);
        }
        let whole = Span { start: 0, len: 10 };
        assert_eq!(Zero::Off.shard(ShardGrid::new(10, 3), 1), whole, "unsharded: the whole buffer");
        assert_eq!(Zero::States.shard(ShardGrid::new(10, 1), 0), whole, "one replica: the whole buffer");
    }

    #[test]
    fn each_replica_of_the_run_holds_one_part_of_its_grid() {
        // 10 values over 4 replicas in all: the grid starts at 0, 3, 6, 8, whichever process
        // each replica is in.
        let grid = ShardGrid::new(10, 4);
        assert_eq!(grid.cuts(), [3, 6, 8]);
        let shards: Vec<Span> = (0..4).map(|g| Zero::States.shard(grid, g)).collect();
        let ends: Vec<(i64, i64)> = shards.iter().map(|s| (s.start, s.end())).collect();
        assert_eq!(ends, [(0, 3), (3, 6), (6, 8), (8, 10)]);
        // A rank holding replicas 1 and 2 holds their parts together.
        assert_eq!(grid.parts_from(1, 2), Span::between(3, 8));
        // The gradient's shard: stage 2 only, and only where there are parts to hold.
        assert_eq!(Zero::Gradients.grad_shard(grid, 1), Some(Span::between(3, 6)));
        assert_eq!(Zero::States.grad_shard(grid, 1), None);
        assert_eq!(Zero::Gradients.grad_shard(ShardGrid::new(10, 1), 0), None);
    }

    #[test]
    fn the_stage_is_read_as_a_number_and_refused_where_it_cannot_split() {
        assert_eq!("1".parse(), Ok(Zero::States));
        assert_eq!("off".parse(), Ok(Zero::Off));
        assert_eq!("2".parse(), Ok(Zero::Gradients));
        assert!("3".parse::<Zero>().unwrap_err().contains("use 0, 1 or 2"));
        assert!(Zero::States.check(1).unwrap_err().contains("this run has one"));
        assert!(Zero::Gradients.check(1).unwrap_err().starts_with("--zero 2 splits the gradients"));
        assert!(Zero::Gradients.shards_states() && !Zero::States.shards_gradients());
        let grid = ShardGrid::new(10, 4);
        assert_eq!(Zero::Gradients.shard(grid, 1), Span::between(3, 6), "stage 2 shards as stage 1 does");
        assert_eq!(Zero::States.check(2), Ok(()));
        assert_eq!(Zero::Off.check(1), Ok(()));
    }
}
