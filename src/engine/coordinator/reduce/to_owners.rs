//! Each rank receives only its block of the sum: the reduction under `--zero 2`. The buckets
//! are the sinks' own buffers (`engine::grad_sink`). A bucket's buffers are summed over the
//! process's replicas and reduced to the ranks whose blocks of the flat buffer the bucket meets
//! (a reduce-scatter cut at the shard grid, as DeepSpeed's stage 2 reduces a bucket's slices to
//! their owners); once its reduces are done each replica copies its shard's part of the sum
//! into its gradient buffer and the bucket's buffers go back to the sinks' pools.
//!
//! This part owns the bucket buffers' life on the coordinator's side: it zeroes the buffers of
//! buckets a replica never wrote, queues the buckets in flight (at most
//! [`BUCKETS_IN_FLIGHT`](crate::engine::bucket_pool::BUCKETS_IN_FLIGHT): as a newer one starts
//! the oldest is waited for and kept), gives each buffer back once kept, and ends the pools'
//! step, so that the buffers in use stay few whatever the model's size.

use std::sync::Arc;

use tch::Tensor;

use super::peers::Peers;
use super::Reduced;
use crate::engine::bucket_pool::Flights;
use crate::engine::coordinator::Replicas;
use crate::engine::grad_sink::GradSink;
use crate::engine::EngineError;
use dpt_core::optim::Span;
use dpt_sys::c10d::{nccl_side_join, CudaEvent, Work};

/// The reduce to the shards' owners, with the buckets it has started and not yet kept.
pub(super) struct ReduceToOwners {
    /// Each local replica's gradient hooks, whose bucket buffers are reduced.
    sinks: Vec<Arc<GradSink>>,
    /// The step's buckets whose reduces are in flight, oldest first.
    waiting: Flights<Kept>,
}

/// A bucket whose reduces are started: which it is, its range of the flat buffer, per local
/// replica the buffer its shard's part of the sum is read from, each GPU's buffer its NCCL sum
/// wrote (whose side stream is joined before the buffers go back), and its reduces over the
/// ranks.
pub(super) struct Kept {
    bucket: usize,
    range: Span,
    sources: Vec<Tensor>,
    summed: Vec<Tensor>,
    works: Vec<Work<'static>>,
}

impl ReduceToOwners {
    pub(super) fn new(sinks: Vec<Arc<GradSink>>) -> ReduceToOwners {
        ReduceToOwners { sinks, waiting: Flights::default() }
    }

    /// Makes bucket `b`'s buffer for every replica that has none yet (no gradient of it came:
    /// an empty batch), zeroed on the current stream; on a GPU, an event recorded after the
    /// zeroing, for the side streams to wait for.
    pub(super) fn fresh_buffers(&self, b: usize) -> Result<Vec<CudaEvent>, EngineError> {
        let mut made = Vec::new();
        for sink in self.sinks.iter().filter(|s| !s.holds(b)) {
            let buffer = sink.staged(b).map_err(|e| EngineError::Nccl(e.to_string()))?;
            if let Some(tch::Device::Cuda(i)) = buffer.map(|t| t.device()) {
                let mut event = CudaEvent::ordering(i)?;
                event.record()?;
                made.push(event);
            }
        }
        Ok(made)
    }

    /// Bucket `b` (at `range` of the flat buffer): its buffers summed over the local replicas,
    /// then its sum over the ranks started as one reduce to each rank whose block it meets
    /// (queued while the side streams are current); [`ReduceToOwners::started`] takes it on.
    pub(super) fn start(&self, peers: &Peers, replicas: &Replicas, b: usize, range: Span) -> Result<Kept, EngineError> {
        let mut staged = Vec::with_capacity(self.sinks.len());
        for sink in &self.sinks {
            let buffer = sink.staged(b).map_err(|e| EngineError::Nccl(e.to_string()))?;
            staged.push(buffer.ok_or(EngineError::Invariant("--zero 2 without bucket buffers"))?);
        }
        let first = peers.sum_local(&mut staged)?;
        let summed = peers.gpu_sums(&staged);
        // Within one process every GPU's first replica has the sum (NCCL's allreduce); across
        // processes only the first GPU's receives the ranks' sum.
        let sources = match &peers.world {
            None => (0..staged.len()).map(|i| staged[peers.holder_of(i)].shallow_clone()).collect(),
            Some(_) => staged.iter().map(|_| first.shallow_clone()).collect(),
        };
        let mut works = Vec::new();
        if let Some(w) = &peers.world {
            let _launch = peers.launch_stream(&first)?;
            for rank in 0..w.size {
                let block = replicas.block_of(w, rank);
                let (lo, hi) = (block.start.max(range.start), block.end().min(range.end()));
                if lo < hi {
                    works.extend(w.start_reduce(&first.narrow(0, lo - range.start, hi - lo), rank)?);
                }
            }
        }
        Ok(Kept { bucket: b, range, sources, summed, works })
    }

    /// A bucket [`ReduceToOwners::start`] started, once the GPUs' current streams are back:
    /// across processes it is queued (the oldest in flight kept to make room); within one
    /// process its sums are done once queued, and it is kept at once.
    pub(super) fn started(&mut self, peers: &Peers, replicas: &Replicas, kept: Kept) -> Result<(), EngineError> {
        match peers.world {
            Some(_) => match self.waiting.started(kept) {
                Some(oldest) => self.keep(peers, replicas, oldest),
                None => Ok(()),
            },
            None => self.keep(peers, replicas, kept),
        }
    }

    /// The step's reduction is over: every bucket still in flight kept, and the pools' buffers
    /// freed until the next backward pass. Each replica holds its own shard: it is its own
    /// holder.
    pub(super) fn finish(&mut self, peers: &Peers, replicas: &Replicas) -> Result<Reduced, EngineError> {
        let waiting: Vec<Kept> = self.waiting.drain().collect();
        for k in waiting {
            self.keep(peers, replicas, k)?;
        }
        for sink in &self.sinks {
            sink.end_step();
        }
        Ok(Reduced { holders: (0..self.sinks.len()).collect() })
    }

    /// Finishes bucket `k`: waits for its reduces, copies each replica's shard's part of its sum
    /// into the replica's gradient buffer (on the GPUs' current streams, after their side
    /// streams), and gives its buffers back to the sinks.
    fn keep(&self, peers: &Peers, replicas: &Replicas, k: Kept) -> Result<(), EngineError> {
        let Kept { bucket, range, sources, summed, works } = k;
        peers.finish_world(works)?;
        let _guard = tch::no_grad_guard();
        if !summed.is_empty() {
            // Every GPU's side stream, not only the first's: each one's buffer goes back to its
            // pool below, and its next writer must come after the NCCL sum that wrote it.
            nccl_side_join(&summed)?;
        }
        for (i, source) in sources.iter().enumerate() {
            let shard = replicas.grad_range(i);
            let (from, to) = (shard.start.max(range.start), shard.end().min(range.end()));
            if from < to {
                let mut into = replicas.grad(i).narrow(0, from - shard.start, to - from);
                into.copy_(&source.narrow(0, from - range.start, to - from));
            }
        }
        drop(sources);
        for sink in &self.sinks {
            sink.release(bucket)?;
        }
        Ok(())
    }
}
