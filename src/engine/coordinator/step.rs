//! One data-parallel step and its kin: dispatch shards to the workers, gather their replies
//! (a silent replica is reported stuck), reduce the gradients, apply the SGD update to every
//! replica and copy the BatchNorm statistics from replica 0; plus the reports, the evaluation
//! and the workers' start and shutdown. The cross-process reduce of the distributed engine
//! belongs between the gather and the update.

use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use tch::Tensor;

use super::super::allreduce::{hand_out, sum_into_first, LocalReduce};
use super::super::clock::{self, PhaseClock};
use super::super::sgd::{Sgd, StepScalars};
use super::super::shard::shards;
use super::super::tally::{Tally, Window};
use super::super::worker::{FromWorker, ReplicaHandles, ToWorker};
use super::super::EngineError;
use super::{mix_seed, Coordinator, JOIN_GRACE, SLOW_WORK_FACTOR};
use crate::dist::c10d::nccl_local_allreduce;
use crate::dist::c10d::ReduceOp;
use crate::dist::World;
use crate::record::Record;

/// Makes a report window global: training figures summed over the ranks, each replica's
/// timings gathered (each rank fills its own replicas' slots), step phases at their slowest.
fn sum_over_ranks(world: &World, w: &mut Window) -> Result<(), EngineError> {
    let mut sums = [w.tally.loss, w.tally.correct, w.tally.samples];
    world.allreduce_values(&mut sums, ReduceOp::Sum)?;
    [w.tally.loss, w.tally.correct, w.tally.samples] = sums;
    let mut replicas: Vec<f64> = w.replicas.iter().flat_map(|r| [r.data, r.compute]).collect();
    world.allreduce_values(&mut replicas, ReduceOp::Sum)?;
    for (r, pair) in w.replicas.iter_mut().zip(replicas.chunks(2)) {
        (r.data, r.compute) = (pair[0], pair[1]);
    }
    let t = &mut w.timing;
    let mut phases = [t.data, t.compute, t.allreduce, t.update];
    world.allreduce_values(&mut phases, ReduceOp::Max)?;
    (t.data, t.compute, t.allreduce, t.update) = (phases[0], phases[1], phases[2], phases[3]);
    Ok(())
}

/// The error for a failed timing event on the first replica's device (named only on failure).
fn clock_failure(device: crate::engine::DeviceId) -> impl Fn(crate::dist::c10d::C10dError) -> EngineError {
    move |e| EngineError::Coordinator { replica: Some(0), device: Some(device.to_string()), message: e.0 }
}

impl Coordinator {
    fn worker_error(&self, replica: usize, message: String) -> EngineError {
        EngineError::Worker { replica, device: self.cfg().devices[replica].to_string(), message }
    }

    /// Sends `cmd(replica)` to every worker.
    pub(super) fn broadcast(&self, cmd: impl Fn(usize) -> ToWorker) -> Result<(), EngineError> {
        for (i, tx) in self.p.to_workers.iter().enumerate() {
            tx.send(cmd(i)).map_err(|_| EngineError::WorkersGone)?;
        }
        Ok(())
    }

    /// One reply from each worker, within `timeout` in all; a silent replica is reported stuck.
    fn gather(&self, timeout: Duration) -> Result<Vec<FromWorker>, EngineError> {
        let k = self.cfg().devices.len();
        let deadline = Instant::now() + timeout;
        let mut replies: Vec<Option<FromWorker>> = (0..k).map(|_| None).collect();
        for _ in 0..k {
            match self.p.from_workers.recv_deadline(deadline) {
                Ok(FromWorker::Failed { replica, message }) => {
                    return Err(self.worker_error(replica, message))
                }
                Ok(msg) => {
                    let r = msg.replica();
                    replies[r] = Some(msg);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let replicas: Vec<usize> = (0..k).filter(|&i| replies[i].is_none()).collect();
                    let devices = replicas.iter().map(|&r| self.cfg().devices[r].to_string()).collect();
                    return Err(EngineError::Stalled { replicas, devices, seconds: timeout.as_secs_f64() });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(EngineError::WorkersGone),
            }
        }
        Ok(replies.into_iter().flatten().collect())
    }

    fn slow_timeout(&self) -> Duration {
        self.cfg().step_timeout * SLOW_WORK_FACTOR
    }

    /// Waits for every replica to be built, and takes its buffers.
    pub(super) fn wait_ready(&mut self) -> Result<(), EngineError> {
        for reply in self.gather(self.slow_timeout())? {
            if let FromWorker::Ready { handles, .. } = reply {
                let ReplicaHandles { params, grads, buffers, named_params, named_buffers } = *handles;
                self.momentum.push(params.zeros_like());
                self.scalars.push(StepScalars::new(params.device()));
                self.params.push(params);
                self.grads.push(grads);
                self.buffers.push(buffers);
                if self.named.is_empty() {
                    self.named = named_params.into_iter().chain(named_buffers).collect();
                }
            }
        }
        let first = self.params.first().map_or(tch::Device::Cpu, Tensor::device);
        let device = self.cfg().devices.first().copied().unwrap_or(crate::engine::DeviceId::Cpu);
        self.clock = Some(PhaseClock::new(first, 2).map_err(clock_failure(device))?);
        if let Some(r) = &self.p.cfg.resume {
            for m in &self.momentum {
                self.p.param_layout.load_logical(m, &r.momentum);
            }
        }
        Ok(())
    }

    /// Trains on rows `start..start + len` of the epoch order, split over the replicas.
    pub(super) fn train_step(&mut self, start: usize, len: usize) -> Result<(), EngineError> {
        let (seed, global_step) = (self.cfg().seed, self.global_step);
        // The global batch is split over every replica of every process; ours are a slice.
        let (offset, total) = self.replica_span();
        let parts = shards(len, total);
        let timed = clock::sampled(self.cfg().has_gpu(), global_step);
        self.broadcast(|i| ToWorker::Step {
            start: start + parts[offset + i].0,
            len: parts[offset + i].1,
            global_step,
            dropout_seed: mix_seed(mix_seed(seed, global_step as u64), (offset + i) as u64 + 1) as i64,
            timed,
        })?;
        let (mut data_max, mut compute_max) = (0.0f64, 0.0f64);
        for reply in self.gather(self.cfg().step_timeout)? {
            if let FromWorker::StepDone { replica, timing: Some((data, compute)) } = reply {
                data_max = data_max.max(data);
                compute_max = compute_max.max(compute);
                let r = &mut self.window.replicas[offset + replica];
                r.data += data;
                r.compute += compute;
            }
        }
        let clock_error = clock_failure(self.cfg().devices[0]);
        let mut clock = self.clock.take().ok_or(EngineError::WorkersGone)?;
        clock.start(timed).map_err(&clock_error)?;
        let holders = match self.reduce.clone() {
            LocalReduce::Copies => {
                sum_into_first(&mut self.grads);
                if let Some(w) = &self.p.world {
                    w.allreduce_flat(&self.grads[0])?;
                }
                hand_out(&mut self.grads)
            }
            LocalReduce::Nccl { groups } => self.nccl_reduce(&groups)?,
        };
        clock.mark().map_err(&clock_error)?;
        let sgd = Sgd { lr: self.lr, ..self.cfg().sgd };
        let inject = self.cfg().faults.coordinator_panic;
        for (i, &holder) in holders.iter().enumerate() {
            self.touching = Some(i);
            if inject == Some((i, global_step)) {
                panic!("injected fault: the coordinator fails updating replica {i} at step {global_step}");
            }
            sgd.step(
                &mut self.params[i],
                &self.grads[holder],
                &mut self.momentum[i],
                len,
                &mut self.scalars[i],
            );
        }
        self.touching = None;
        if let Some((first, rest)) = self.buffers.split_first_mut() {
            if let Some(w) = &self.p.world {
                if first.numel() > 0 {
                    w.broadcast(first)?;
                }
            }
            for b in rest {
                b.copy_(first);
            }
        }
        clock.mark().map_err(&clock_error)?;
        let phases = clock.read().map_err(&clock_error)?;
        self.clock = Some(clock);
        self.global_step += 1;
        let w = &mut self.window;
        w.steps += 1;
        if let Some(p) = phases {
            w.timed += 1;
            w.timing.data += data_max;
            w.timing.compute += compute_max;
            w.timing.allreduce += p[0];
            w.timing.update += p[1];
        }
        if self.cfg().check_replicas {
            self.check_replicas()?;
        }
        Ok(())
    }

    /// Sums the gradients of replicas sharing a GPU on it, then over the GPUs with one NCCL
    /// call (then over the processes, from the first GPU, handed back to the others); returns
    /// which buffer each replica reads.
    fn nccl_reduce(&mut self, groups: &[Vec<usize>]) -> Result<Vec<usize>, EngineError> {
        let _guard = tch::no_grad_guard();
        for g in groups {
            for &m in &g[1..] {
                let other = self.grads[m].shallow_clone();
                let _ = self.grads[g[0]].g_add_(&other);
            }
        }
        let mut firsts: Vec<Tensor> = groups.iter().map(|g| self.grads[g[0]].shallow_clone()).collect();
        nccl_local_allreduce(&mut firsts).map_err(|e| EngineError::Nccl(e.0))?;
        if let Some(w) = &self.p.world {
            w.allreduce_flat(&firsts[0])?;
            if let Some((first, rest)) = firsts.split_first_mut() {
                for f in rest {
                    f.copy_(first);
                }
            }
        }
        let mut holders = vec![0; self.grads.len()];
        for g in groups {
            for &m in g {
                holders[m] = g[0];
            }
        }
        Ok(holders)
    }

    fn check_replicas(&self) -> Result<(), EngineError> {
        let dev0 = self.params[0].device();
        for i in 1..self.params.len() {
            let same = |a: &Tensor, b: &Tensor| a.to_device(dev0).equal(b);
            if !same(&self.params[i], &self.params[0]) || !same(&self.buffers[i], &self.buffers[0]) {
                return Err(EngineError::ReplicasDiverged { replica: i, step: self.global_step });
            }
        }
        Ok(())
    }

    /// Reads the workers' figures (one device sync each) and reports the window.
    pub(super) fn report(
        &mut self,
        epoch: usize,
        step: usize,
        steps_per_epoch: usize,
    ) -> Result<(), EngineError> {
        self.broadcast(|_| ToWorker::Report)?;
        for reply in self.gather(self.cfg().step_timeout)? {
            if let FromWorker::Sums { sums, .. } = reply {
                self.window.add(sums);
            }
        }
        let total = self.replica_span().1;
        let mut w = std::mem::replace(&mut self.window, Window::new(total));
        if let Some(world) = &self.p.world {
            sum_over_ranks(world, &mut w)?;
            world.mark_progress(self.global_step);
        }
        let stats = w.stats(epoch, step, steps_per_epoch, self.global_step, self.lr);
        self.note_stragglers(&stats);
        self.epoch.add(w.tally);
        let finite = stats.loss.is_finite();
        self.emit(Record::Step(Box::new(stats)));
        if !finite {
            self.on_nan();
        }
        Ok(())
    }

    /// Says once per replica when it runs slower than the others (see `record::straggler`).
    fn note_stragglers(&mut self, stats: &crate::record::StepStats) {
        let times: Vec<f64> = stats.replicas.iter().map(|r| r.data + r.compute).collect();
        let Some(median) = crate::record::straggler::median(&times) else { return };
        for replica in crate::record::straggler::stragglers(&times) {
            if self.straggled.len() < times.len() {
                self.straggled.resize(times.len(), false);
            }
            if std::mem::replace(&mut self.straggled[replica], true) {
                continue;
            }
            let device = self.replica_device(replica);
            self.emit(crate::record::Change::Straggler {
                replica,
                device,
                step_ms: times[replica] * 1e3,
                median_ms: median * 1e3,
                global_step: self.global_step,
            });
        }
    }

    /// The device of global replica `replica`, with its rank in a multi-process run.
    fn replica_device(&self, replica: usize) -> String {
        match &self.p.world {
            Some(w) => w
                .devices
                .iter()
                .enumerate()
                .flat_map(|(rank, ds)| ds.iter().map(move |d| format!("rank {rank} {d}")))
                .nth(replica)
                .unwrap_or_else(|| format!("replica {replica}")),
            None => self.cfg().devices.get(replica).map_or_else(String::new, ToString::to_string),
        }
    }

    /// The test set's figures, split over the replicas.
    pub(super) fn evaluate(&mut self) -> Result<Tally, EngineError> {
        let (offset, replicas) = self.replica_span();
        let parts = shards(self.p.test_len, replicas);
        self.broadcast(|i| ToWorker::Evaluate { start: parts[offset + i].0, len: parts[offset + i].1 })?;
        let mut total = Tally::default();
        for reply in self.gather(self.slow_timeout())? {
            if let FromWorker::Evaluated { sums, .. } = reply {
                total.add(sums);
            }
        }
        if let Some(w) = &self.p.world {
            let mut v = [total.loss, total.correct, total.samples];
            w.allreduce_values(&mut v, ReduceOp::Sum)?;
            [total.loss, total.correct, total.samples] = v;
        }
        Ok(total)
    }

    /// This process's replicas as (global index of the first, replicas in the whole run).
    pub(super) fn replica_span(&self) -> (usize, usize) {
        match &self.p.world {
            Some(w) => (w.replica_offset(), w.total_replicas()),
            None => (0, self.cfg().devices.len()),
        }
    }

    /// Asks every worker to leave and joins those that do within a grace period; a stuck one is
    /// left behind (it ends with the process) rather than hanging the shutdown.
    pub(super) fn shutdown(&mut self) {
        for tx in &self.p.to_workers {
            let _ = tx.send(ToWorker::Shutdown);
        }
        self.p.to_workers.clear();
        // Every worker holds a sender of `workers_alive`; all gone means all threads ended.
        let all_ended =
            matches!(self.p.workers_alive.recv_timeout(JOIN_GRACE), Err(RecvTimeoutError::Disconnected));
        for t in self.p.threads.drain(..) {
            if all_ended || t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
