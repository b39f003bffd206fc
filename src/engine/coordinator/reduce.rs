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
//! Under `--zero 2` the buckets are the sink's own buffers (`engine::grad_sink`): a bucket's sum
//! over the local replicas goes to the ranks as one reduce per rank whose block of the flat
//! buffer the bucket meets (each rank's part of it summed to that rank only: a reduce-scatter
//! cut at the shard grid, as DeepSpeed's stage 2 reduces a bucket's slices to their owners),
//! and once a bucket's collectives are done each replica copies its shard's part of the sum into
//! its gradient buffer and gives the bucket's buffer back to its sink. At most
//! [`BUCKETS_IN_FLIGHT`](crate::engine::bucket_pool::BUCKETS_IN_FLIGHT) buckets wait for their reduces at once: as a newer one starts, the
//! oldest is waited for and kept, so the buffers in use stay few whatever the model's size.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use tch::Tensor;

use super::overlap::OverlapProbe;
use super::{Replicas, WorkerPool};
use crate::dist::World;
use crate::engine::allreduce::{hand_out, sum_into_first, LocalReduce};
use crate::engine::buckets::{Buckets, Readiness};
use crate::engine::clock;
use crate::engine::grad_sink::GradSink;
use crate::engine::worker::{FromWorker, ReplicaHandles};
use crate::engine::EngineError;
use crate::record::Change;
use dpt_core::device::DeviceId;
use dpt_core::optim::Span;
use dpt_sys::c10d::{nccl_local_allreduce, nccl_side_join, set_thread_device, SideStream, Work};

mod sharded;
use crate::engine::bucket_pool::Flights;
use sharded::Kept;

/// How gradients are summed: over this process's replicas (the reduction), then across the
/// other processes (`world`).
pub(super) struct Exchange {
    world: Option<Box<World>>,
    /// This process's replicas' devices.
    devices: Vec<DeviceId>,
    /// How long a step's replies and collectives may take.
    timeout: Duration,
    /// How the local replicas' gradients are summed.
    local: LocalReduce,
    /// The ranges of the flat gradient that are reduced (the trainable parameters').
    runs: Vec<Span>,
    /// The buckets reduced while the backward pass runs (`None`: after it).
    buckets: Option<Arc<Buckets>>,
    /// Each local replica's hooks, which report those buckets.
    sinks: Vec<Arc<GradSink>>,
    /// Whether the buckets were re-planned from the first step's gradient order.
    replanned: bool,
    /// On several GPUs with buckets, the device events the overlap figure comes from.
    probe: Option<RefCell<OverlapProbe>>,
    /// Whether the sums are reduced to the replicas that keep their shards (`--zero 2`).
    shards_gradients: bool,
}

/// What a step's reduction has started and not yet finished: the collectives over the ranks,
/// and under `--zero 2` the buckets whose sums the replicas keep their shards of once their
/// collectives are done, oldest first.
#[derive(Default)]
pub(super) struct InFlight {
    works: Vec<Work<'static>>,
    kept: Flights<Kept>,
}

/// A step's replies, with what its bucketed reduction started while they came.
pub(super) struct Gathered {
    pub(super) replies: Vec<FromWorker>,
    pub(super) in_flight: InFlight,
    /// Buckets started by a report from within a backward pass, and buckets that could be
    /// (all but the last, which waits for the backward pass's last gradient).
    pub(super) early: usize,
    pub(super) buckets: usize,
}

/// A step's gradients summed: which buffer holds each replica's sum.
pub(super) struct Reduced {
    pub(super) holders: Vec<usize>,
}

/// Side stream guards of several GPUs, left in the reverse order they were entered (each
/// restores the device and stream that were current when it was entered).
struct SideStreams(Vec<SideStream>);

impl Drop for SideStreams {
    fn drop(&mut self) {
        while self.0.pop().is_some() {}
    }
}

impl Exchange {
    /// For this process's replicas on `devices` (and the other processes of `world`), whose
    /// steps take at most `timeout`.
    pub(super) fn new(world: Option<Box<World>>, devices: &[DeviceId], timeout: Duration) -> Exchange {
        Exchange {
            world,
            devices: devices.to_vec(),
            timeout,
            local: LocalReduce::plan(devices, dpt_sys::c10d::nccl_compiled()),
            runs: Vec::new(),
            buckets: None,
            sinks: Vec::new(),
            replanned: false,
            probe: None,
            shards_gradients: false,
        }
    }

    /// The other processes of a multi-process run.
    pub(super) fn world(&self) -> Option<&World> {
        self.world.as_deref()
    }

    /// Whether this process decides for all (rank 0, or the only process).
    pub(super) fn leads(&self) -> bool {
        self.world.as_ref().is_none_or(|w| w.rank == 0)
    }

    /// This process's replicas as (global index of the first, replicas in the whole run).
    pub(super) fn span(&self) -> (usize, usize) {
        match &self.world {
            Some(w) => (w.replica_offset(), w.total_replicas()),
            None => (0, self.devices.len()),
        }
    }

    /// The device of global replica `replica`, with its rank in a multi-process run.
    pub(super) fn replica_device(&self, replica: usize) -> String {
        match &self.world {
            Some(w) => w
                .devices
                .iter()
                .enumerate()
                .flat_map(|(rank, ds)| ds.iter().map(move |d| format!("rank {rank} {d}")))
                .nth(replica)
                .unwrap_or_else(|| format!("replica {replica}")),
            None => self.devices.get(replica).map_or_else(String::new, ToString::to_string),
        }
    }

    /// Takes a ready replica's gradient hooks (every replica has the same buckets: the same
    /// model and layout).
    pub(super) fn adopt(&mut self, handles: &mut ReplicaHandles) {
        if let Some(sink) = handles.sink.take() {
            self.buckets.get_or_insert_with(|| sink.buckets());
            self.sinks.push(sink);
        }
    }

    /// Every replica is in: the ranges to reduce (`replicas`' trainable ones), the overlap
    /// probe on several GPUs, and NCCL's communicators made before the first step (`hang`: a
    /// test's set-up that never returns).
    pub(super) fn set_up(&mut self, replicas: &Replicas, hang: bool) -> Result<(), EngineError> {
        self.runs = replicas.trainable_runs();
        self.shards_gradients = replicas.shards_gradients();
        if let LocalReduce::Nccl { groups } = &self.local {
            let devices: Vec<tch::Device> = groups.iter().map(|g| replicas.devices()[g[0]]).collect();
            if let (Some(tch::Device::Cuda(i)), Some(_)) = (devices.first(), &self.buckets) {
                // Without events (a build without CUDA headers) the figure is left out.
                self.probe = OverlapProbe::on_gpu(*i).ok().map(RefCell::new);
            }
            self.set_up_nccl(devices, hang)
        } else if hang {
            self.set_up_nccl(Vec::new(), hang)
        } else {
            Ok(())
        }
    }

    /// Makes NCCL's communicators between `devices` (what the first allreduce would do, and
    /// where a machine whose peer-to-peer set-up hangs hangs) on a helper thread, within the
    /// step timeout.
    fn set_up_nccl(&self, devices: Vec<tch::Device>, hang: bool) -> Result<(), EngineError> {
        let names: Vec<String> = self.devices.iter().map(ToString::to_string).collect();
        let waiting = clock::waiting("NCCL's communicator set-up", names.join(","), self.timeout);
        let result = waiting.run("dpt-nccl-setup", move || {
            if hang {
                // Never returns: park wakes spuriously at most.
                loop {
                    std::thread::park();
                }
            }
            if let Some(tch::Device::Cuda(i)) = devices.first() {
                set_thread_device(*i)?;
            }
            let mut ones: Vec<Tensor> =
                devices.iter().map(|d| Tensor::ones([1], (tch::Kind::Float, *d))).collect();
            // torch::cuda::nccl keeps the communicators of a device list for the run's calls.
            nccl_local_allreduce(&mut ones)?;
            devices.iter().for_each(|d| {
                if let tch::Device::Cuda(i) = d {
                    tch::Cuda::synchronize(*i as i64);
                }
            });
            Ok::<(), dpt_sys::c10d::C10dError>(())
        })?;
        result.map_err(EngineError::from)
    }

    /// Under `--zero 2`, the most bytes of bucket buffers a replica holds at once during a step:
    /// the `at_once` largest buckets' (f32); 0 when the replicas keep a whole gradient.
    pub(super) fn bucket_buffer_bytes(&self, at_once: usize) -> u64 {
        let Some(buckets) = self.buckets.as_ref().filter(|_| self.shards_gradients) else { return 0 };
        let mut lengths: Vec<i64> = buckets.ranges.iter().map(|r| r.len).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.iter().take(at_once).map(|&len| 4 * len.max(0) as u64).sum()
    }

    /// For the screen and the record: `copies through cpu + gloo across 2 ranks, 3 buckets
    /// overlapping backward`.
    pub(super) fn describe(&self) -> String {
        let (devices, world) = (&self.devices, self.world.as_deref());
        let local = self.local.describe(devices);
        let across = world.map_or(String::new(), |w| {
            let why = w.backend_note.as_ref().map_or(String::new(), |n| format!(" ({n})"));
            format!(" + {} across {} ranks{why}", format!("{:?}", w.backend).to_lowercase(), w.size)
        });
        let when = match &self.buckets {
            Some(b) if self.shards_gradients => {
                format!(", {} bucket(s) reduced to their shards' replicas (--zero 2)", b.len())
            }
            Some(b) if b.len() == 1 => ", 1 bucket (nothing to overlap)".to_owned(),
            Some(b) => format!(", {} buckets overlapping backward", b.len()),
            None if devices.len() > 1 || world.is_some() => ", after backward".to_owned(),
            None => String::new(),
        };
        format!("{local}{across}{when}")
    }

    /// Gathers the replicas' replies to a step; with buckets, reduces each bucket as soon as
    /// every local replica has reported it, in bucket order (so every rank starts the same
    /// collectives in the same order). A `sampled` step is probed on GPUs (`overlap.rs`).
    pub(super) fn gather_step(
        &self,
        pool: &WorkerPool,
        replicas: &Replicas,
        sampled: bool,
    ) -> Result<Gathered, EngineError> {
        let timeout = self.timeout;
        let Some(buckets) = &self.buckets else {
            let replies = pool.gather(timeout)?;
            return Ok(Gathered { replies, in_flight: InFlight::default(), early: 0, buckets: 0 });
        };
        let probe = self.probe.as_ref();
        if let Some(p) = probe {
            p.borrow_mut().begin(sampled);
        }
        let mut ready = Readiness::new(buckets.len(), self.devices.len());
        let mut in_flight = InFlight::default();
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
                // Under --zero 2, a replica no gradient of this bucket reached (an empty batch)
                // gets a zeroed buffer here, on its current stream; the side streams wait for it.
                let fresh = match replicas.shards_gradients() {
                    true => self.fresh_buffers(b)?,
                    false => Vec::new(),
                };
                let side = self.side_streams()?;
                for sink in &self.sinks {
                    sink.hand_off(b)?;
                }
                for made in &fresh {
                    made.block()?;
                }
                if replicas.shards_gradients() {
                    let kept = self.reduce_bucket_sharded(replicas, b, buckets.ranges[b])?;
                    drop(side);
                    match self.world {
                        Some(_) => {
                            if let Some(oldest) = in_flight.kept.started(kept) {
                                self.keep_bucket(replicas, oldest)?;
                            }
                        }
                        // Within one process the sums are done once queued: nothing to wait for.
                        None => self.keep_bucket(replicas, kept)?,
                    }
                } else {
                    in_flight.works.extend(self.reduce_range(replicas, buckets.ranges[b])?);
                    drop(side);
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
        Ok(Gathered { replies, in_flight, early, buckets: buckets.len().saturating_sub(1) })
    }

    /// Finishes the step's reduction (all of it when nothing is in flight: the unbucketed
    /// path); returns which buffer holds each replica's reduced gradient.
    pub(super) fn finish_reduce(
        &self,
        replicas: &Replicas,
        in_flight: InFlight,
    ) -> Result<Reduced, EngineError> {
        let InFlight { works, mut kept } = in_flight;
        if self.buckets.is_none() {
            for &run in &self.runs {
                // Nothing is left in flight across runs: each run's sum is waited for here.
                let started = self.reduce_range(replicas, run)?;
                self.finish_world(started)?;
            }
        } else {
            self.finish_world(works)?;
        }
        if replicas.shards_gradients() {
            for k in kept.drain() {
                self.keep_bucket(replicas, k)?;
            }
            for sink in &self.sinks {
                sink.end_step();
            }
            // Each replica holds its own shard: it is its own holder.
            return Ok(Reduced { holders: (0..self.sinks.len()).collect() });
        }
        if let LocalReduce::Nccl { groups } = &self.local {
            // The update reads the sums on the GPUs' current streams.
            let firsts: Vec<Tensor> = groups.iter().map(|g| replicas.grad(g[0])).collect();
            nccl_side_join(&firsts)?;
        }
        let mut holders = Vec::new();
        for &run in &self.runs {
            let mut grads = replicas.grads_over(run);
            holders = match &self.local {
                LocalReduce::Copies => hand_out(&mut grads),
                LocalReduce::Nccl { groups } => self.nccl_spread(&mut grads, groups),
            };
        }
        Ok(Reduced { holders })
    }

    /// After the first step this process runs, plans the buckets again in the order its
    /// gradients arrived in, as DDP's reducer rebuilds its buckets after the first iteration:
    /// the order of the first replica, of rank 0 across processes (DDP broadcasts rank 0's), so
    /// that every replica and rank reduces the same buckets in the same order; unless the new
    /// plan would fragment the buckets ([`Buckets::fragments`]). Says so when the plan changed. Runs between steps, when no hook runs.
    pub(super) fn replan_buckets(&mut self, global_step: usize) -> Result<Option<Change>, EngineError> {
        let (Some(current), Some(first)) = (&self.buckets, self.sinks.first()) else { return Ok(None) };
        if std::mem::replace(&mut self.replanned, true) {
            return Ok(None);
        }
        let mut order = current.arrival_order(&first.arrival());
        if let Some(w) = &self.world {
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
            sink.rebucket(Arc::clone(&planned));
        }
        let after = planned.len();
        self.buckets = Some(planned);
        Ok(Some(Change::Rebucketed { global_step, before, after }))
    }

    /// The share of buckets whose allreduce overlapped a backward pass, as (overlapped, of
    /// those that could), from a step's count on the host (`step`, [`Gathered`]'s): on GPUs only what device events measured (none without a probe, or
    /// before the GPU has passed them), on the CPU the buckets the step started during a
    /// backward pass.
    pub(super) fn overlap(&self, step: (usize, usize)) -> Result<Option<(usize, usize)>, EngineError> {
        let on_gpu = self.devices.iter().any(|d| matches!(d, DeviceId::Cuda(_)));
        match (&self.probe, on_gpu) {
            (Some(p), _) => p.borrow_mut().read().map_err(EngineError::from),
            (None, true) => Ok(None),
            (None, false) => Ok(Some(step)),
        }
    }

    fn finish_world(&self, in_flight: Vec<Work<'static>>) -> Result<(), EngineError> {
        match &self.world {
            Some(w) => Ok(w.finish(in_flight)?),
            None => Ok(()),
        }
    }

    /// The side stream of every GPU of this process made current, when their sums run there
    /// (NCCL within the process); none otherwise.
    fn side_streams(&self) -> Result<SideStreams, EngineError> {
        let mut guards = SideStreams(Vec::new());
        let LocalReduce::Nccl { groups } = &self.local else { return Ok(guards) };
        for g in groups {
            if let Some(DeviceId::Cuda(i)) = self.devices.get(g[0]) {
                guards.0.push(SideStream::enter(*i)?);
            }
        }
        Ok(guards)
    }

    /// Sums `range` of the flat gradients over the local replicas into the first replica's
    /// buffer, and starts its sum over the ranks.
    fn reduce_range(
        &self,
        replicas: &Replicas,
        range: Span,
    ) -> Result<Vec<Work<'static>>, EngineError> {
        let mut grads = replicas.grads_over(range);
        let first = match &self.local {
            LocalReduce::Copies => {
                sum_into_first(&mut grads);
                grads[0].shallow_clone()
            }
            LocalReduce::Nccl { groups } => self.nccl_sum(&mut grads, groups)?,
        };
        let Some(w) = &self.world else { return Ok(Vec::new()) };
        // The local sum is queued on the first GPU's side stream: the collective across the
        // ranks is launched from it, so that c10d's wait for the current stream waits for it.
        let _side = match (&self.local, first.device()) {
            (LocalReduce::Nccl { .. }, tch::Device::Cuda(i)) => {
                Some(SideStream::enter(i)?)
            }
            _ => None,
        };
        Ok(w.start_allreduce(&first)?)
    }

    /// Sums the gradients of replicas sharing a GPU on it, then over the GPUs with one NCCL
    /// call; returns the first GPU's sum (what the ranks then sum).
    fn nccl_sum(&self, grads: &mut [Tensor], groups: &[Vec<usize>]) -> Result<Tensor, EngineError> {
        let _guard = tch::no_grad_guard();
        for g in groups {
            for &m in &g[1..] {
                let other = grads[m].shallow_clone();
                let _ = grads[g[0]].g_add_(&other);
            }
        }
        let mut firsts: Vec<Tensor> = groups.iter().map(|g| grads[g[0]].shallow_clone()).collect();
        nccl_local_allreduce(&mut firsts)?;
        Ok(firsts.swap_remove(0))
    }

    /// After the sum over the ranks (which reached the first GPU only), copies it to the other
    /// GPUs; returns which buffer each replica reads (its GPU's first replica's).
    fn nccl_spread(&self, grads: &mut [Tensor], groups: &[Vec<usize>]) -> Vec<usize> {
        let _guard = tch::no_grad_guard();
        if self.world.is_some() {
            let first = grads[groups[0][0]].shallow_clone();
            for g in &groups[1..] {
                grads[g[0]].copy_(&first);
            }
        }
        let mut holders = vec![0; grads.len()];
        for g in groups {
            for &m in g {
                holders[m] = g[0];
            }
        }
        holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::coordinator::ModelLayout;
    use crate::engine::optim::OptimConfig;

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

    #[test]
    fn gradients_summed_after_backward_are_every_replicas_sum() {
        let mut replicas = Replicas::new(ModelLayout::of_params(&[&[2]]));
        for _ in 0..2 {
            replicas.add_flat(
                Tensor::zeros([2], tch::kind::FLOAT_CPU),
                Tensor::zeros([0], tch::kind::FLOAT_CPU),
                OptimConfig::default(),
            );
        }
        replicas.grad(0).copy_(&Tensor::from_slice(&[1.0f32, 2.0]));
        replicas.grad(1).copy_(&Tensor::from_slice(&[3.0f32, 4.0]));
        let mut e = exchange(&[DeviceId::Cpu, DeviceId::Cpu]);
        e.set_up(&replicas, false).unwrap();
        let reduced = e.finish_reduce(&replicas, InFlight::default()).unwrap();
        for &h in &reduced.holders {
            assert_eq!(Vec::<f32>::try_from(replicas.grad(h)).unwrap(), [4.0, 6.0]);
        }
    }
}
