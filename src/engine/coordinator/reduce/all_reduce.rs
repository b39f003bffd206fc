//! Every replica receives the whole sum: the reduction without `--zero 2`. A bucket's (or,
//! after the backward passes, a trainable range's) gradients are summed over the local
//! replicas into the first one's buffer and then over the ranks; at the step's end the sum is
//! handed to the replicas on other devices.

use tch::Tensor;

use super::peers::Peers;
use super::Reduced;
use crate::engine::allreduce::{hand_out, LocalReduce};
use crate::engine::coordinator::Replicas;
use crate::engine::EngineError;
use dpt_core::optim::Span;
use dpt_sys::c10d::{nccl_side_join, Work};

/// The allreduce of the trainable ranges of the flat gradient.
#[derive(Default)]
pub(super) struct AllReduce {
    /// The ranges of the flat gradient that are reduced (the trainable parameters').
    runs: Vec<Span>,
    /// The step's collectives across the ranks started while the backward passes ran.
    in_flight: Vec<Work<'static>>,
}

impl AllReduce {
    pub(super) fn new(runs: Vec<Span>) -> AllReduce {
        AllReduce { runs, in_flight: Vec::new() }
    }

    /// A bucket at `range` reported by every local replica: its sum started (see
    /// [`AllReduce::sum`]), its collectives left in flight until the step's end.
    pub(super) fn start(&mut self, peers: &Peers, replicas: &Replicas, range: Span) -> Result<(), EngineError> {
        let started = Self::sum(peers, replicas, range)?;
        self.in_flight.extend(started);
        Ok(())
    }

    /// Sums `range` of the flat gradients over the local replicas into the first replica's
    /// buffer, and starts its sum over the ranks.
    fn sum(
        peers: &Peers,
        replicas: &Replicas,
        range: Span,
    ) -> Result<Vec<Work<'static>>, EngineError> {
        let mut grads = replicas.grads_over(range);
        let first = peers.sum_local(&mut grads)?;
        let Some(w) = &peers.world else { return Ok(Vec::new()) };
        let _launch = peers.launch_stream(&first)?;
        Ok(w.start_allreduce(&first)?)
    }

    /// Finishes the step's sums: waits for the collectives started while the backward passes
    /// ran (`bucketed`; without buckets every trainable range is reduced now, each waited for
    /// before the next), and hands the sum to the replicas on other devices; returns which
    /// buffer holds each replica's sum.
    pub(super) fn finish(&mut self, peers: &Peers, replicas: &Replicas, bucketed: bool) -> Result<Reduced, EngineError> {
        if bucketed {
            peers.finish_world(std::mem::take(&mut self.in_flight))?;
        } else {
            for &run in &self.runs {
                let started = Self::sum(peers, replicas, run)?;
                peers.finish_world(started)?;
            }
        }
        if let LocalReduce::Nccl { groups } = &peers.local {
            // The update reads the sums on the GPUs' current streams.
            let firsts: Vec<Tensor> = groups.iter().map(|g| replicas.grad(g[0])).collect();
            nccl_side_join(&firsts)?;
        }
        let mut holders = Vec::new();
        for &run in &self.runs {
            let mut grads = replicas.grads_over(run);
            holders = match &peers.local {
                LocalReduce::Copies => hand_out(&mut grads),
                LocalReduce::Nccl { groups } => spread(peers, &mut grads, groups),
            };
        }
        Ok(Reduced { holders })
    }
}

/// After the sum over the ranks (which reached the first GPU only), copies it to the other
/// GPUs; returns which buffer each replica reads (its GPU's first replica's).
fn spread(peers: &Peers, grads: &mut [Tensor], groups: &[Vec<usize>]) -> Vec<usize> {
    let _guard = tch::no_grad_guard();
    if peers.world.is_some() {
        let first = grads[groups[0][0]].shallow_clone();
        for g in &groups[1..] {
            grads[g[0]].copy_(&first);
        }
    }
    (0..grads.len()).map(|m| peers.holder_of(m)).collect()
}
