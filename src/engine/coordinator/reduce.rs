//! The gradient reduction of a step, in one of two ways with the same sums: after every
//! replica's backward pass (over the trainable ranges of the flat gradient, as the seed's
//! `allreduce` does), or overlapped with the backward passes bucket by bucket, as DDP's reducer
//! does (see `engine::buckets`): each bucket is summed over the local replicas the moment all of
//! them have reported it, and its sum over the ranks is started and left in flight while the
//! backward passes go on; the step waits for the collectives only after its last reply.
//!
//! On several GPUs, a bucket's NCCL sum runs on each GPU's side stream, not on the stream the
//! backward kernels run on, so they never wait for it (ProcessGroupNCCL's NCCL streams, as DDP
//! uses them): the side stream waits for the gradients first, the collective across the ranks
//! is launched from GPU 0's side stream (c10d orders it after that stream's work), and the
//! GPUs' current streams wait for the side streams only where the sums are read, before the
//! update.
//!
//! A bucket's sum is the same element by element as the whole buffer's: bit for bit within a
//! process, and across processes as far as the collective's own order of summation allows.
//!
//! The exchange gathers the replies and decides when a bucket is ready; what a bucket's sum is
//! and who receives it is one of two parts: every replica the whole sum (`all_reduce.rs`), or
//! under `--zero 2` each rank its block of it (`to_owners.rs`, which also owns the bucket
//! buffers' life on this side). Both sum through the same peers (`peers.rs`).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use super::overlap::OverlapProbe;
use super::{Replicas, WorkerPool};
use crate::dist::World;
use crate::engine::allreduce::LocalReduce;
use crate::engine::buckets::{Buckets, Readiness};
use crate::engine::grad_sink::GradSink;
use crate::engine::worker::{FromWorker, ReplicaHandles};
use crate::engine::EngineError;
use crate::record::Change;
use dpt_core::device::DeviceId;

mod all_reduce;
mod peers;
mod to_owners;

use all_reduce::AllReduce;
use peers::Peers;
use to_owners::ReduceToOwners;

/// How gradients are summed: over this process's replicas, then across the other processes,
/// into every replica or into the shards' owners.
pub(super) struct Exchange {
    peers: Peers,
    /// How long a step's replies and collectives may take.
    timeout: Duration,
    /// The buckets reduced while the backward pass runs (`None`: after it).
    buckets: Option<Arc<Buckets>>,
    /// Each local replica's hooks, which report those buckets.
    sinks: Vec<Arc<GradSink>>,
    /// Whether the buckets were re-planned from the first step's gradient order.
    replanned: bool,
    /// On several GPUs with buckets, the device events the overlap figure comes from.
    probe: Option<RefCell<OverlapProbe>>,
    /// What a bucket's sum is and who receives it.
    sums: Sums,
}

/// Who receives a step's sums.
enum Sums {
    /// Every replica, the whole sum.
    AllReduce(AllReduce),
    /// Each rank its block of it (`--zero 2`).
    ToOwners(ReduceToOwners),
}

/// A step's replies, with how many buckets its reduction started while they came.
pub(super) struct Gathered {
    pub(super) replies: Vec<FromWorker>,
    /// Buckets started by a report from within a backward pass, and buckets that could be
    /// (all but the last, which waits for the backward pass's last gradient).
    pub(super) early: usize,
    pub(super) buckets: usize,
}

/// A step's gradients summed: which buffer holds each replica's sum.
pub(super) struct Reduced {
    pub(super) holders: Vec<usize>,
}

impl Exchange {
    /// For this process's replicas on `devices` (and the other processes of `world`), whose
    /// steps take at most `timeout`.
    pub(super) fn new(world: Option<Box<World>>, devices: &[DeviceId], timeout: Duration) -> Exchange {
        Exchange {
            peers: Peers::new(world, devices),
            timeout,
            buckets: None,
            sinks: Vec::new(),
            replanned: false,
            probe: None,
            sums: Sums::AllReduce(AllReduce::default()),
        }
    }

    /// The other processes of a multi-process run.
    pub(super) fn world(&self) -> Option<&World> {
        self.peers.world.as_deref()
    }

    /// Whether this process decides for all (rank 0, or the only process).
    pub(super) fn leads(&self) -> bool {
        self.peers.world.as_ref().is_none_or(|w| w.rank == 0)
    }

    /// This process's replicas as (global index of the first, replicas in the whole run).
    pub(super) fn span(&self) -> (usize, usize) {
        self.peers.span()
    }

    /// The device of global replica `replica`, with its rank in a multi-process run.
    pub(super) fn replica_device(&self, replica: usize) -> String {
        self.peers.replica_device(replica)
    }

    /// Takes a ready replica's gradient hooks (every replica has the same buckets: the same
    /// model and layout).
    pub(super) fn adopt(&mut self, handles: &mut ReplicaHandles) {
        if let Some(sink) = handles.sink.take() {
            self.buckets.get_or_insert_with(|| sink.buckets());
            self.sinks.push(sink);
        }
    }

    /// Every replica is in: who receives the sums (the trainable ranges of `replicas`, or
    /// their shards' owners), the overlap probe on several GPUs, and NCCL's communicators made
    /// before the first step (`hang`: a test's set-up that never returns).
    pub(super) fn set_up(&mut self, replicas: &Replicas, hang: bool) -> Result<(), EngineError> {
        self.sums = match replicas.shards_gradients() {
            true if self.buckets.is_none() => return Err(EngineError::Invariant("--zero 2 without bucket buffers")),
            true => Sums::ToOwners(ReduceToOwners::new(self.sinks.clone())),
            false => Sums::AllReduce(AllReduce::new(replicas.trainable_runs())),
        };
        if let LocalReduce::Nccl { groups } = &self.peers.local {
            let devices: Vec<tch::Device> = groups.iter().map(|g| replicas.devices()[g[0]]).collect();
            if let (Some(tch::Device::Cuda(i)), Some(_)) = (devices.first(), &self.buckets) {
                // Without events (a build without CUDA headers) the figure is left out.
                self.probe = OverlapProbe::on_gpu(*i).ok().map(RefCell::new);
            }
            self.peers.set_up_nccl(devices, hang, self.timeout)
        } else if hang {
            self.peers.set_up_nccl(Vec::new(), hang, self.timeout)
        } else {
            Ok(())
        }
    }

    /// Under `--zero 2`, the most bytes of bucket buffers a replica holds at once during a step:
    /// the `at_once` largest buckets' (f32); 0 when the replicas keep a whole gradient.
    pub(super) fn bucket_buffer_bytes(&self, at_once: usize) -> u64 {
        let (Some(buckets), Sums::ToOwners(_)) = (&self.buckets, &self.sums) else { return 0 };
        let mut lengths: Vec<i64> = buckets.ranges.iter().map(|r| r.len).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.iter().take(at_once).map(|&len| 4 * len.max(0) as u64).sum()
    }

    /// For the screen and the record: `copies through cpu + gloo across 2 ranks, 3 buckets
    /// overlapping backward`.
    pub(super) fn describe(&self) -> String {
        let several = self.peers.devices.len() > 1 || self.peers.world.is_some();
        let when = match (&self.buckets, &self.sums) {
            (Some(b), Sums::ToOwners(_)) => {
                format!(", {} bucket(s) reduced to their shards' replicas (--zero 2)", b.len())
            }
            (Some(b), _) if b.len() == 1 => ", 1 bucket (nothing to overlap)".to_owned(),
            (Some(b), _) => format!(", {} buckets overlapping backward", b.len()),
            (None, _) if several => ", after backward".to_owned(),
            (None, _) => String::new(),
        };
        format!("{}{when}", self.peers.describe())
    }

    /// Gathers the replicas' replies to a step; with buckets, reduces each bucket as soon as
    /// every local replica has reported it, in bucket order (so every rank starts the same
    /// collectives in the same order). A `sampled` step is probed on GPUs (`overlap.rs`).
    pub(super) fn gather_step(
        &mut self,
        pool: &WorkerPool,
        replicas: &Replicas,
        sampled: bool,
    ) -> Result<Gathered, EngineError> {
        let timeout = self.timeout;
        let Some(buckets) = &self.buckets else {
            let replies = pool.gather(timeout)?;
            return Ok(Gathered { replies, early: 0, buckets: 0 });
        };
        let (peers, sinks, sums) = (&self.peers, &self.sinks, &mut self.sums);
        let probe = self.probe.as_ref();
        if let Some(p) = probe {
            p.borrow_mut().begin(sampled);
        }
        let mut ready = Readiness::new(buckets.len(), peers.devices.len());
        let mut early = 0;
        let replies = pool.gather_with(timeout, |msg| {
            let launch = match msg {
                FromWorker::BucketReady { replica, bucket } => {
                    let launch = ready.report(*replica, *bucket);
                    // The last bucket waits for the last gradient: it hides nothing.
                    early += launch.clone().filter(|&b| b + 1 < buckets.len()).count();
                    launch
                }
                // A finished backward pass has all its buckets, reported or not (a parameter
                // that took no part in it, an empty shard).
                FromWorker::StepDone { replica, .. } => ready.finished(*replica),
                _ => return Ok(()),
            };
            for b in launch {
                // With NCCL's sums on the GPUs' side streams, the side streams wait for the
                // hooks' events (not for every kernel queued on the GPUs so far) and run the
                // bucket's sums: the guards make them current while they are queued.
                let range = buckets.ranges[b];
                match sums {
                    Sums::AllReduce(all) => {
                        let _side = peers.side_streams()?;
                        hand_off(sinks, b)?;
                        all.start(peers, replicas, range)?;
                    }
                    Sums::ToOwners(owners) => {
                        // A replica no gradient of this bucket reached (an empty batch) gets a
                        // zeroed buffer here, on its current stream; the side streams wait for it.
                        let fresh = owners.fresh_buffers(b)?;
                        let side = peers.side_streams()?;
                        hand_off(sinks, b)?;
                        for made in &fresh {
                            made.block()?;
                        }
                        let kept = owners.start(peers, replicas, b, range)?;
                        drop(side);
                        owners.started(peers, replicas, kept)?;
                    }
                }
                if let Some(p) = probe {
                    p.borrow_mut().summed(b, buckets.len())?;
                }
            }
            Ok(())
        })?;
        if let Some(p) = probe {
            p.borrow_mut().backward_queued()?;
        }
        Ok(Gathered { replies, early, buckets: buckets.len().saturating_sub(1) })
    }

    /// Finishes the step's reduction (all of it on the unbucketed path, where nothing was
    /// started during the backward passes); returns which buffer holds each replica's sum.
    pub(super) fn finish_reduce(&mut self, replicas: &Replicas) -> Result<Reduced, EngineError> {
        match &mut self.sums {
            Sums::AllReduce(all) => all.finish(&self.peers, replicas, self.buckets.is_some()),
            Sums::ToOwners(owners) => owners.finish(&self.peers, replicas),
        }
    }

    /// After the first step this process runs, plans the buckets again in the order its
    /// gradients arrived in, as DDP's reducer rebuilds its buckets after the first iteration:
    /// the order of the first replica, of rank 0 across processes (DDP broadcasts rank 0's), so
    /// that every replica and rank reduces the same buckets in the same order; unless the new
    /// plan would fragment the buckets ([`Buckets::fragments`]). Says so when the plan changed.
    /// Runs between steps, when no hook runs.
    pub(super) fn replan_buckets(&mut self, global_step: usize) -> Result<Option<Change>, EngineError> {
        let (Some(current), Some(first)) = (&self.buckets, self.sinks.first()) else { return Ok(None) };
        if std::mem::replace(&mut self.replanned, true) {
            return Ok(None);
        }
        let mut order = current.arrival_order(&first.arrival());
        if let Some(w) = &self.peers.world {
            let mut values: Vec<f64> = order.iter().map(|&k| k as f64).collect();
            w.broadcast_values(&mut values)?;
            order = values.iter().map(|&v| v as usize).collect();
        }
        let planned = Arc::new(current.replanned(&order));
        if planned.ranges == current.ranges || planned.fragments(current) {
            return Ok(None);
        }
        let before = current.len();
        for sink in &self.sinks {
            sink.rebucket(Arc::clone(&planned))?;
        }
        let after = planned.len();
        self.buckets = Some(planned);
        Ok(Some(Change::Rebucketed { global_step, before, after }))
    }

    /// The share of buckets whose allreduce overlapped a backward pass, as (overlapped, of
    /// those that could), from a step's count on the host (`step`, [`Gathered`]'s): on GPUs
    /// only what device events measured (none without a probe, or before the GPU has passed
    /// them), on the CPU the buckets the step started during a backward pass.
    pub(super) fn overlap(&self, step: (usize, usize)) -> Result<Option<(usize, usize)>, EngineError> {
        let on_gpu = self.peers.devices.iter().any(|d| matches!(d, DeviceId::Cuda(_)));
        match (&self.probe, on_gpu) {
            (Some(p), _) => p.borrow_mut().read().map_err(EngineError::from),
            (None, true) => Ok(None),
            (None, false) => Ok(Some(step)),
        }
    }
}

/// Every replica's hooks hand bucket `b` to the reduction (on a GPU, the side streams wait for
/// its gradients' events).
fn hand_off(sinks: &[Arc<GradSink>], b: usize) -> Result<(), EngineError> {
    for sink in sinks {
        sink.hand_off(b)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::coordinator::ModelLayout;
    use crate::engine::optim::OptimConfig;
    use dpt_core::optim::Zero;
    use tch::Tensor;

    fn exchange(devices: &[DeviceId]) -> Exchange {
        Exchange::new(None, devices, Duration::from_secs(5))
    }

    #[test]
    fn one_process_leads_spans_its_replicas_and_names_them() {
        let e = exchange(&[DeviceId::Cpu, DeviceId::Cpu]);
        assert!(e.leads() && e.world().is_none());
        assert_eq!(e.span(), (0, 2));
        assert_eq!(e.replica_device(1), "cpu");
        assert!(e.describe().ends_with(", after backward"), "{}", e.describe());
        assert_eq!(e.overlap((1, 3)).unwrap(), Some((1, 3)), "the CPU counts on the host");
    }

    /// A run's two CPU replicas of a model of one two-element parameter, under `zero`.
    fn two_replicas(zero: Zero) -> Replicas {
        let mut replicas = Replicas::over(ModelLayout::of_params(&[&[2]]), (0, 2));
        for _ in 0..2 {
            replicas.add_flat(
                Tensor::zeros([2], tch::kind::FLOAT_CPU),
                Tensor::zeros([0], tch::kind::FLOAT_CPU),
                OptimConfig { zero, ..OptimConfig::default() },
            );
        }
        replicas
    }

    #[test]
    fn the_sums_go_to_every_replica_unless_the_replicas_shard_their_gradients() {
        for zero in [Zero::Off, Zero::States] {
            let mut e = exchange(&[DeviceId::Cpu, DeviceId::Cpu]);
            e.set_up(&two_replicas(zero), false).unwrap();
            assert!(matches!(e.sums, Sums::AllReduce(_)), "{zero:?}");
            assert_eq!(e.bucket_buffer_bytes(2), 0, "no bucket buffers without --zero 2");
        }
        // --zero 2 reduces the sinks' bucket buffers: without them it is a bug, said as one.
        let mut e = exchange(&[DeviceId::Cpu, DeviceId::Cpu]);
        let err = e.set_up(&two_replicas(Zero::Gradients), false).unwrap_err();
        assert!(matches!(err, EngineError::Invariant(_)), "{err}");
    }

    #[test]
    fn gradients_summed_after_backward_are_every_replicas_sum() {
        let replicas = two_replicas(Zero::Off);
        replicas.grad(0).copy_(&Tensor::from_slice(&[1.0f32, 2.0]));
        replicas.grad(1).copy_(&Tensor::from_slice(&[3.0f32, 4.0]));
        let mut e = exchange(&[DeviceId::Cpu, DeviceId::Cpu]);
        e.set_up(&replicas, false).unwrap();
        let reduced = e.finish_reduce(&replicas).unwrap();
        for &h in &reduced.holders {
            assert_eq!(Vec::<f32>::try_from(replicas.grad(h)).unwrap(), [4.0, 6.0]);
        }
    }
}
