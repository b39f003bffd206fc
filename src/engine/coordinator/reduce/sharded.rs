//! The reduction's `--zero 2` half: a bucket's buffers summed over the process's replicas and
//! reduced to the ranks that own its parts, then kept: each replica copies its shard's part of
//! the sum and gives the buffer back to its sink's pool (see the parent module).

use tch::Tensor;

use super::Exchange;
use crate::engine::allreduce::{sum_into_first, LocalReduce};
use crate::engine::coordinator::Replicas;
use crate::engine::EngineError;
use dpt_core::optim::Span;
use dpt_sys::c10d::{nccl_side_join, CudaEvent, SideStream, Work};

/// A bucket summed under `--zero 2`: which it is, its range of the flat buffer, per local
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

impl Exchange {
    /// Under `--zero 2`, bucket `b` (at `range` of the flat buffer): its buffers summed over
    /// the local replicas, then its sum over the ranks started as one reduce to each rank
    /// whose block it meets; returns it in flight, with what each replica will keep its shard
    /// from.
    pub(super) fn reduce_bucket_sharded(
        &self,
        replicas: &Replicas,
        b: usize,
        range: Span,
    ) -> Result<Kept, EngineError> {
        let mut staged = Vec::with_capacity(self.sinks.len());
        for sink in &self.sinks {
            let buffer = sink.staged(b).map_err(|e| EngineError::Nccl(e.to_string()))?;
            staged.push(buffer.ok_or(EngineError::Invariant("--zero 2 without bucket buffers"))?);
        }
        let first = match &self.local {
            LocalReduce::Copies => {
                sum_into_first(&mut staged);
                staged[0].shallow_clone()
            }
            LocalReduce::Nccl { groups } => self.nccl_sum(&mut staged, groups)?,
        };
        let summed = match &self.local {
            LocalReduce::Nccl { groups } => groups.iter().map(|g| staged[g[0]].shallow_clone()).collect(),
            LocalReduce::Copies => Vec::new(),
        };
        // Within one process every GPU's first replica has the sum (NCCL's allreduce); across
        // processes only the first GPU's receives the ranks' sum.
        let sources = match (&self.local, &self.world) {
            (LocalReduce::Nccl { groups }, None) => (0..staged.len())
                .map(|i| {
                    let g = groups.iter().find(|g| g.contains(&i)).map_or(0, |g| g[0]);
                    staged[g].shallow_clone()
                })
                .collect(),
            _ => staged.iter().map(|_| first.shallow_clone()).collect(),
        };
        let mut works = Vec::new();
        if let Some(w) = &self.world {
            let _side = match (&self.local, first.device()) {
                (LocalReduce::Nccl { .. }, tch::Device::Cuda(i)) => {
                    Some(SideStream::enter(i)?)
                }
                _ => None,
            };
            let (start, end) = (range.start, range.end());
            for rank in 0..w.size {
                let block = replicas.block_of(w, rank);
                let (lo, hi) = (block.start.max(start), block.end().min(end));
                if lo < hi {
                    works.extend(w.start_reduce(&first.narrow(0, lo - start, hi - lo), rank)?);
                }
            }
        }
        Ok(Kept { bucket: b, range, sources, summed, works })
    }

    /// Under `--zero 2`, finishes bucket `k`: waits for its reduces, copies each replica's
    /// shard's part of its sum into the replica's gradient buffer (on the GPUs' current streams,
    /// after their side streams), and gives its buffers back to the sinks.
    pub(super) fn keep_bucket(&self, replicas: &Replicas, k: Kept) -> Result<(), EngineError> {
        let Kept { bucket, range, sources, summed, works } = k;
        self.finish_world(works)?;
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
            sink.release(bucket);
        }
        Ok(())
    }

    /// Under `--zero 2`, makes bucket `b`'s buffer for every replica that has none yet (no
    /// gradient of it came: an empty batch), zeroed on the current stream; on a GPU, an event
    /// recorded after the zeroing, for the side streams to wait for.
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
}
