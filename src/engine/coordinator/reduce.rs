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

use std::cell::RefCell;
use std::sync::Arc;

use tch::Tensor;

use super::overlap::OverlapProbe;
use super::Coordinator;
use crate::dist::c10d::{nccl_local_allreduce, nccl_side_join, SideStream, Work};
use crate::engine::allreduce::{hand_out, sum_into_first, LocalReduce};
use crate::engine::buckets::{Buckets, Readiness};
use crate::engine::grad_sink::GradSink;
use crate::engine::worker::FromWorker;
use crate::engine::{DeviceId, EngineError};

/// How this process reduces its replicas' gradients.
/// How gradients are summed: over this process's replicas (`reduction`), then across the
/// other processes (`world`).
pub(super) struct Exchange {
    pub(super) world: Option<Box<crate::dist::World>>,
    pub(super) reduction: Reduction,
}

pub(super) struct Reduction {
    /// How the local replicas' gradients are summed.
    pub local: LocalReduce,
    /// The ranges of the flat gradient that are reduced (the trainable parameters').
    pub runs: Vec<(i64, i64)>,
    /// The buckets reduced while the backward pass runs (`None`: after it).
    pub buckets: Option<Arc<Buckets>>,
    /// Each local replica's hooks, which report those buckets.
    pub sinks: Vec<Arc<GradSink>>,
    /// Whether the buckets were re-planned from the first step's gradient order.
    pub replanned: bool,
    /// On several GPUs with buckets, the device events the overlap figure comes from.
    pub probe: Option<RefCell<OverlapProbe>>,
}

impl Reduction {
    pub fn plan(devices: &[DeviceId]) -> Reduction {
        Reduction {
            local: LocalReduce::plan(devices, crate::dist::c10d::nccl_compiled()),
            runs: Vec::new(),
            buckets: None,
            sinks: Vec::new(),
            replanned: false,
            probe: None,
        }
    }

    /// For the screen and the record: `copies through cpu + gloo across 2 ranks, 3 buckets
    /// overlapping backward`.
    pub fn describe(&self, devices: &[DeviceId], world: Option<&crate::dist::World>) -> String {
        let local = self.local.describe(devices);
        let across = world.map_or(String::new(), |w| {
            let why = w.backend_note.as_ref().map_or(String::new(), |n| format!(" ({n})"));
            format!(" + {} across {} ranks{why}", format!("{:?}", w.backend).to_lowercase(), w.size)
        });
        let when = match &self.buckets {
            Some(b) if b.len() == 1 => ", 1 bucket (nothing to overlap)".to_owned(),
            Some(b) => format!(", {} buckets overlapping backward", b.len()),
            None if devices.len() > 1 || world.is_some() => ", after backward".to_owned(),
            None => String::new(),
        };
        format!("{local}{across}{when}")
    }
}

/// The collectives over the ranks a step has started and not yet waited for.
pub(super) type InFlight = Vec<Work<'static>>;

/// A step's replies, with what its bucketed reduction started while they came.
pub(super) struct Gathered {
    pub replies: Vec<FromWorker>,
    pub in_flight: InFlight,
    /// Buckets started by a report from within a backward pass, and buckets that could be
    /// (all but the last, which waits for the backward pass's last gradient).
    pub early: usize,
    pub buckets: usize,
}

/// Side stream guards of several GPUs, left in the reverse order they were entered (each
/// restores the device and stream that were current when it was entered).
struct SideStreams(Vec<SideStream>);

impl Drop for SideStreams {
    fn drop(&mut self) {
        while self.0.pop().is_some() {}
    }
}

impl Coordinator {
    /// Gathers the replicas' replies to a step; with buckets, reduces each bucket as soon as
    /// every local replica has reported it, in bucket order (so every rank starts the same
    /// collectives in the same order). A `sampled` step is probed on GPUs (`overlap.rs`).
    pub(super) fn gather_step(&self, sampled: bool) -> Result<Gathered, EngineError> {
        let timeout = self.cfg().step_timeout();
        let Some(buckets) = &self.exchange.reduction.buckets else {
            let replies = self.pool.gather(timeout)?;
            return Ok(Gathered { replies, in_flight: Vec::new(), early: 0, buckets: 0 });
        };
        let probe = self.exchange.reduction.probe.as_ref();
        if let Some(p) = probe {
            p.borrow_mut().begin(sampled);
        }
        let mut ready = Readiness::new(buckets.len(), self.cfg().devices.len());
        let mut in_flight = Vec::new();
        let mut early = 0;
        let replies = self.pool.gather_with(timeout, |msg| {
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
                let side = self.side_streams()?;
                for sink in &self.exchange.reduction.sinks {
                    sink.hand_off(b).map_err(|e| EngineError::Nccl(e.0))?;
                }
                in_flight.extend(self.reduce_range(buckets.ranges[b])?);
                drop(side);
                if let Some(p) = probe {
                    p.borrow_mut().summed(b, buckets.len()).map_err(|e| EngineError::Nccl(e.0))?;
                }
            }
            Ok(())
        })?;
        if let Some(p) = probe {
            p.borrow_mut().backward_queued().map_err(|e| EngineError::Nccl(e.0))?;
        }
        Ok(Gathered { replies, in_flight, early, buckets: buckets.len().saturating_sub(1) })
    }

    /// Finishes the step's reduction (all of it when nothing is in flight: the unbucketed
    /// path); returns which buffer holds each replica's reduced gradient.
    pub(super) fn finish_reduce(&self, in_flight: InFlight) -> Result<Vec<usize>, EngineError> {
        if self.exchange.reduction.buckets.is_none() {
            for &run in &self.exchange.reduction.runs {
                // Nothing is left in flight across runs: each run's sum is waited for here.
                let started = self.reduce_range(run)?;
                self.finish_world(started)?;
            }
        } else {
            self.finish_world(in_flight)?;
        }
        if let LocalReduce::Nccl { groups } = &self.exchange.reduction.local {
            // The update reads the sums on the GPUs' current streams.
            let firsts: Vec<Tensor> =
                groups.iter().map(|g| self.update.replicas.grads[g[0]].shallow_clone()).collect();
            nccl_side_join(&firsts).map_err(|e| EngineError::Nccl(e.0))?;
        }
        let mut holders = Vec::new();
        for &run in &self.exchange.reduction.runs {
            let mut grads = self.update.replicas.grads_over(run);
            holders = match &self.exchange.reduction.local {
                LocalReduce::Copies => hand_out(&mut grads),
                LocalReduce::Nccl { groups } => self.nccl_spread(&mut grads, groups),
            };
        }
        Ok(holders)
    }

    /// After the first step this process runs, plans the buckets again in the order its
    /// gradients arrived in, as DDP's reducer rebuilds its buckets after the first iteration:
    /// the order of the first replica, of rank 0 across processes (DDP broadcasts rank 0's), so
    /// that every replica and rank reduces the same buckets in the same order; unless the new
    /// plan would fragment the buckets ([`Buckets::fragments`]). Says so when the plan changed. Runs between steps, when no hook runs.
    pub(super) fn replan_buckets(&mut self) -> Result<(), EngineError> {
        let r = &mut self.exchange.reduction;
        let (Some(current), Some(first)) = (&r.buckets, r.sinks.first()) else { return Ok(()) };
        if std::mem::replace(&mut r.replanned, true) {
            return Ok(());
        }
        let mut order = current.arrival_order(&first.arrival());
        if let Some(w) = &self.exchange.world {
            let mut values: Vec<f64> = order.iter().map(|&k| k as f64).collect();
            w.broadcast_values(&mut values)?;
            order = values.iter().map(|&v| v as usize).collect();
        }
        let planned = Arc::new(current.replanned(&order));
        if planned.ranges == current.ranges || planned.fragments(current) {
            return Ok(());
        }
        let before = current.len();
        for sink in &r.sinks {
            sink.rebucket(Arc::clone(&planned));
        }
        let after = planned.len();
        r.buckets = Some(planned);
        self.emit(crate::record::Change::Rebucketed { global_step: self.steps.global_step, before, after });
        Ok(())
    }

    /// Adds to the report window the share of buckets whose allreduce overlapped a backward
    /// pass: on GPUs only what device events measured (none without a probe), on the CPU the
    /// buckets the step started during a backward pass.
    pub(super) fn count_overlap(&mut self, step: (usize, usize)) -> Result<(), EngineError> {
        let counted = match (&self.exchange.reduction.probe, self.cfg().has_gpu()) {
            (Some(p), _) => p.borrow_mut().read().map_err(|e| EngineError::Nccl(e.0))?,
            (None, true) => None,
            (None, false) => Some(step),
        };
        if let Some((early, buckets)) = counted {
            self.report.window.buckets.0 += early;
            self.report.window.buckets.1 += buckets;
        }
        Ok(())
    }

    fn finish_world(&self, in_flight: InFlight) -> Result<(), EngineError> {
        match &self.exchange.world {
            Some(w) => Ok(w.finish(in_flight)?),
            None => Ok(()),
        }
    }

    /// The side stream of every GPU of this process made current, when their sums run there
    /// (NCCL within the process); none otherwise.
    fn side_streams(&self) -> Result<SideStreams, EngineError> {
        let mut guards = SideStreams(Vec::new());
        let LocalReduce::Nccl { groups } = &self.exchange.reduction.local else { return Ok(guards) };
        for g in groups {
            if let Some(crate::engine::DeviceId::Cuda(i)) = self.cfg().devices.get(g[0]) {
                guards.0.push(SideStream::enter(*i).map_err(|e| EngineError::Nccl(e.0))?);
            }
        }
        Ok(guards)
    }

    /// Sums `range` of the flat gradients over the local replicas into the first replica's
    /// buffer, and starts its sum over the ranks.
    fn reduce_range(&self, range: (i64, i64)) -> Result<InFlight, EngineError> {
        let mut grads = self.update.replicas.grads_over(range);
        let first = match &self.exchange.reduction.local {
            LocalReduce::Copies => {
                sum_into_first(&mut grads);
                grads[0].shallow_clone()
            }
            LocalReduce::Nccl { groups } => self.nccl_sum(&mut grads, groups)?,
        };
        let Some(w) = &self.exchange.world else { return Ok(Vec::new()) };
        // The local sum is queued on the first GPU's side stream: the collective across the
        // ranks is launched from it, so that c10d's wait for the current stream waits for it.
        let _side = match (&self.exchange.reduction.local, first.device()) {
            (LocalReduce::Nccl { .. }, tch::Device::Cuda(i)) => {
                Some(SideStream::enter(i).map_err(|e| EngineError::Nccl(e.0))?)
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
        nccl_local_allreduce(&mut firsts).map_err(|e| EngineError::Nccl(e.0))?;
        Ok(firsts.swap_remove(0))
    }

    /// After the sum over the ranks (which reached the first GPU only), copies it to the other
    /// GPUs; returns which buffer each replica reads (its GPU's first replica's).
    fn nccl_spread(&self, grads: &mut [Tensor], groups: &[Vec<usize>]) -> Vec<usize> {
        let _guard = tch::no_grad_guard();
        if self.exchange.world.is_some() {
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
