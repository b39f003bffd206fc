//! One data-parallel step and its kin: dispatch shards to the workers, gather their replies,
//! reduce the gradients, apply the optimizer's update to every replica and copy the BatchNorm
//! statistics from replica 0; plus the reports and the evaluation. The gradients' reduction,
//! local and across processes, is `reduce.rs`.

use std::cell::RefCell;
use std::time::Duration;

use tch::Tensor;

use super::{Coordinator, SLOW_WORK_FACTOR};
use crate::dist::c10d::ReduceOp;
use crate::dist::c10d::{nccl_local_allreduce, set_thread_device};
use crate::dist::World;
use crate::engine::allreduce::LocalReduce;
use crate::engine::clock::{self, PhaseClock, Phases};
use crate::engine::evaluation::Evaluation;
use crate::engine::optim::loss_scale::LossScaler;
use crate::engine::tally::Window;
use crate::engine::worker::{FromWorker, ToWorker};
use crate::engine::EngineError;
use crate::input::shard::shards;
use crate::record::{Change, Record};

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

/// The phase clock through one step (taken from the reporter, given back by `finish`), its
/// failures said as the engine's.
struct StepClock {
    clock: PhaseClock,
    device: crate::engine::DeviceId,
}

impl StepClock {
    fn start(
        slot: &mut Option<PhaseClock>,
        device: crate::engine::DeviceId,
        (timed, step): (bool, usize),
    ) -> Result<StepClock, EngineError> {
        let mut clock = slot.take().ok_or(EngineError::WorkersGone)?;
        clock.start(timed, step).map_err(clock_failure(device))?;
        Ok(StepClock { clock, device })
    }

    /// Ends a phase.
    fn mark(&mut self) -> Result<(), EngineError> {
        self.clock.mark().map_err(clock_failure(self.device))
    }

    /// The phases of a timed step readable now (see `engine::clock`); the clock goes back to
    /// `slot`.
    fn finish(mut self, slot: &mut Option<PhaseClock>) -> Result<Option<Phases>, EngineError> {
        let phases = self.clock.finish().map_err(clock_failure(self.device));
        *slot = Some(self.clock);
        phases
    }
}

impl Coordinator {
    fn slow_timeout(&self) -> Duration {
        self.cfg().step_timeout() * SLOW_WORK_FACTOR
    }

    /// Waits for every replica to be built, and takes its buffers.
    pub(super) fn wait_ready(&mut self) -> Result<(), EngineError> {
        for reply in self.pool.gather(self.slow_timeout())? {
            if let FromWorker::Ready { mut handles, .. } = reply {
                // Every replica has the same buckets (the same model and layout).
                if let Some(sink) = handles.sink.take() {
                    self.exchange.reduction.buckets.get_or_insert_with(|| sink.buckets());
                    self.exchange.reduction.sinks.push(sink);
                }
                self.update.replicas.add(*handles, self.cfg.settings.optimizer);
            }
        }
        let first = self.update.replicas.params.first().map_or(tch::Device::Cpu, Tensor::device);
        self.report.clock = Some(PhaseClock::new(first, 2));
        if let Some(r) = &self.cfg.kit.resume {
            self.update.replicas.restore_optimizer(r);
        }
        self.exchange.reduction.runs = self.update.replicas.trainable_runs();
        let resume = self.cfg.kit.resume.as_ref();
        let scaler = self.loss_scaler(resume.and_then(|r| r.state.loss_scaler));
        self.update.start(scaler, resume.map_or(0, |r| r.state.global_step));
        if let Some(decay) = self.cfg.settings.recipe.ema {
            let saved = self.cfg.kit.resume.as_ref().and_then(|r| r.ema.as_ref());
            self.update.replicas.start_ema(decay, saved);
        }
        if let LocalReduce::Nccl { groups } = &self.exchange.reduction.local {
            let devices: Vec<tch::Device> =
                groups.iter().map(|g| self.update.replicas.grads[g[0]].device()).collect();
            if let (Some(tch::Device::Cuda(i)), Some(_)) = (devices.first(), &self.exchange.reduction.buckets)
            {
                // Without events (a build without CUDA headers) the figure is left out.
                self.exchange.reduction.probe =
                    super::overlap::OverlapProbe::on_gpu(*i).ok().map(RefCell::new);
            }
            self.set_up_nccl(devices)?;
        } else if self.cfg.kit.faults.setup_hang {
            self.set_up_nccl(Vec::new())?;
        }
        Ok(())
    }

    /// The dynamic loss scaler the settings ask for, continuing `saved` (a checkpoint's).
    pub(super) fn loss_scaler(&self, saved: Option<LossScaler>) -> Option<LossScaler> {
        self.cfg.settings.precision.loss_scaling().map(|cfg| {
            saved.map_or_else(
                || LossScaler::new(cfg),
                |s| LossScaler { init: cfg.init, growth_interval: cfg.growth_interval, ..s },
            )
        })
    }

    /// Makes NCCL's communicators between `devices` (what the first allreduce would do, and
    /// where a machine whose peer-to-peer set-up hangs hangs) on a helper thread, within the
    /// step timeout.
    fn set_up_nccl(&self, devices: Vec<tch::Device>) -> Result<(), EngineError> {
        let names: Vec<String> = self.cfg.devices.iter().map(ToString::to_string).collect();
        let waiting = clock::waiting("NCCL's communicator set-up", names.join(","), self.cfg.step_timeout());
        let hang = self.cfg.kit.faults.setup_hang;
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
            Ok::<(), crate::dist::c10d::C10dError>(())
        })?;
        result.map_err(|e| EngineError::Nccl(e.0))
    }

    /// Trains on rows `start..start + len` of the epoch order, split over the replicas.
    pub(super) fn train_step(&mut self, start: usize, len: usize) -> Result<(), EngineError> {
        let timed = self.dispatch(start, len)?;
        // With buckets, their reduction starts while the backward passes run.
        let step = self.gather_step(timed)?;
        let bad = self.report.take_replies(step.replies);
        self.name_bad_images(bad);
        let device = self.cfg().devices[0];
        let mut clock = StepClock::start(&mut self.report.clock, device, (timed, self.steps.global_step))?;
        // Only the trainable parameters' gradients travel (a frozen backbone's are zero). With
        // buckets, this phase is what the backward passes did not hide.
        let holders = self.finish_reduce(step.in_flight)?;
        self.count_overlap((step.early, step.buckets))?;
        clock.mark()?;
        self.update(&holders, len)?;
        clock.mark()?;
        let phases = clock.finish(&mut self.report.clock)?;
        self.report.count_step(phases, self.replica_span().0, self.steps.global_step);
        self.steps.global_step += 1;
        self.replan_buckets()?;
        self.check_replicas()
    }

    /// Sends every replica its part of the step; whether the step's phases are timed.
    fn dispatch(&mut self, start: usize, len: usize) -> Result<bool, EngineError> {
        let global_step = self.steps.global_step;
        let timed = clock::sampled(self.cfg().has_gpu(), global_step - self.steps.first_step);
        let ours = self.cfg().devices.len();
        let parts =
            self.steps.assignments(self.cfg().settings.recipe.seed, (start, len), self.replica_span(), ours);
        // The factor computed once on the device from the scale (no host read), copied device
        // to device for replicas elsewhere.
        let factors: Option<Vec<Tensor>> = self.update.scaler.as_ref().map(|s| {
            let factor = s.loss_factor(len);
            self.update.replicas.params.iter().map(|p| factor.to_device(p.device())).collect()
        });
        self.pool.broadcast(|i| ToWorker::Step {
            start: parts[i].start,
            len: parts[i].len,
            global_step,
            dropout_seed: parts[i].dropout_seed,
            timed,
            loss_factor: factors.as_ref().map(|f| f[i].shallow_clone()),
        })?;
        Ok(timed)
    }

    /// The update of a `len`-sample step from the reduced gradient: GradScaler's check, the
    /// step's lr, the optimizer's update of every replica (which an overflowed step leaves as it
    /// was, on the device), BatchNorm statistics shared, the EMA.
    fn update(&mut self, holders: &[usize], len: usize) -> Result<(), EngineError> {
        self.update.unscale(holders, len);
        let lr = self.steps.step_lr();
        let (clip, fault) = (self.cfg.settings.recipe.clip_grad_norm, self.cfg.kit.faults.coordinator_panic);
        let norm = self.update.apply(holders, (len, lr, self.steps.global_step), clip, fault);
        self.report.add_grad_norm(&norm);
        self.update.replicas.share_buffers(self.exchange.world.as_deref())?;
        self.update.replicas.update_ema();
        Ok(())
    }

    /// What a host read of a value the step computed waits for (`phase`), with the step
    /// timeout as its deadline; see [`crate::device::gpu_wait::Waiting::fence`].
    pub(super) fn fence(&self, phase: &str) -> crate::device::gpu_wait::Waiting {
        let device = self.cfg().devices.first().copied().unwrap_or(crate::engine::DeviceId::Cpu);
        clock::waiting(phase, device, self.cfg.step_timeout())
    }

    /// With `placement.check_replicas`, that every replica still equals replica 0.
    fn check_replicas(&self) -> Result<(), EngineError> {
        if !self.cfg().settings.placement.check_replicas {
            return Ok(());
        }
        let fence = self.fence("the replicas' comparison");
        for t in &self.update.replicas.params {
            fence.fence(t.device())?;
        }
        match self.update.replicas.first_diverged() {
            Some(replica) => Err(EngineError::ReplicasDiverged { replica, step: self.steps.global_step }),
            None => Ok(()),
        }
    }

    /// Reads the workers' figures (one device sync each) and reports the window.
    pub(super) fn report(
        &mut self,
        epoch: usize,
        step: usize,
        steps_per_epoch: usize,
    ) -> Result<(), EngineError> {
        self.pool.broadcast(|_| ToWorker::Report)?;
        for reply in self.pool.gather(self.cfg().step_timeout())? {
            if let FromWorker::Sums { sums, .. } = reply {
                self.report.window.add(sums);
            }
        }
        let total = self.replica_span().1;
        let mut w = std::mem::replace(&mut self.report.window, Window::new(total));
        if let Some(world) = &self.exchange.world {
            sum_over_ranks(world, &mut w)?;
            world.mark_progress(self.steps.global_step);
        }
        // Every rank skips the same steps: the count on this rank's device is the run's.
        w.skipped = self.update.newly_skipped();
        let mut stats = w.stats(epoch, step, steps_per_epoch, self.steps.global_step, self.steps.lr);
        stats.loader = w.loader.stats(self.cfg().loader.prefetch, self.cfg().loader.decode_threads);
        if let Some(sum) = self.report.grad_norms.take() {
            // Every rank reduced the same gradients: the norm is already global.
            stats.grad_norm = Some(sum.double_value(&[]) / (w.steps - w.skipped).max(1) as f64);
        }
        (stats.model_flops, stats.mfu) = self.report.model_flops(stats.samples_per_sec);
        stats.cuda_syncs = self.report.syncs_per_step(w.steps);
        if let Some(s) = self.update.scaler_state() {
            stats.loss_scale = Some(f64::from(s.scale));
            stats.skipped_steps = Some(w.skipped);
        }
        if w.timed > 0 {
            self.note_stragglers(&stats);
        }
        self.report.epoch.add(w.tally);
        let finite = stats.loss.is_finite();
        self.report.last_loss = Some(stats.loss);
        self.emit(Record::Step(Box::new(stats)));
        if !finite {
            self.on_nan();
        }
        Ok(())
    }

    /// Says once per replica when its forward and backward pass runs slower than the others'
    /// (see `record::straggler`); a longer wait for its batch is the loader's, not the replica's.
    fn note_stragglers(&mut self, stats: &crate::record::StepStats) {
        let times: Vec<f64> = stats.replicas.iter().map(|r| r.compute).collect();
        let Some((median, new)) = self.report.new_stragglers(&times) else { return };
        for replica in new {
            let device = self.replica_device(replica);
            self.emit(Change::Straggler {
                replica,
                device,
                step_ms: times[replica] * 1e3,
                median_ms: median * 1e3,
                global_step: self.steps.global_step,
            });
        }
    }

    /// The device of global replica `replica`, with its rank in a multi-process run.
    fn replica_device(&self, replica: usize) -> String {
        match &self.exchange.world {
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

    /// The evaluated split's figures (the validation split when there is one and `final_test`
    /// is false; else the test set), split over the replicas.
    pub(super) fn evaluate(&mut self, final_test: bool) -> Result<Evaluation, EngineError> {
        let (offset, replicas) = self.replica_span();
        let val = self.facts.val_len.is_some() && !final_test;
        let len = if val { self.facts.val_len.unwrap_or(0) } else { self.facts.test_len };
        let parts = shards(len, replicas);
        self.pool.broadcast(|i| ToWorker::Evaluate {
            start: parts[offset + i].0,
            len: parts[offset + i].1,
            val,
        })?;
        let mut total = Evaluation::new(self.facts.classes);
        for reply in self.pool.gather(self.slow_timeout())? {
            if let FromWorker::Evaluated { sums, top5, confusion, bad, .. } = reply {
                self.name_bad_images(bad);
                total.add(sums, top5, &confusion);
            }
        }
        if let Some(w) = &self.exchange.world {
            let t = &mut total.sums;
            let mut v = vec![t.loss, t.correct, t.samples, total.top5];
            v.extend_from_slice(&total.confusion);
            w.allreduce_values(&mut v, ReduceOp::Sum)?;
            [t.loss, t.correct, t.samples, total.top5] = [v[0], v[1], v[2], v[3]];
            total.confusion.copy_from_slice(&v[4..]);
        }
        Ok(total)
    }

    /// This process's replicas as (global index of the first, replicas in the whole run).
    /// Names each streamed image that did not decode and was left out, in the record.
    fn name_bad_images(&mut self, bad: Vec<String>) {
        for b in bad {
            self.emit(Change::Warning { message: format!("skipped an image that does not decode: {b}") });
        }
    }

    pub(super) fn replica_span(&self) -> (usize, usize) {
        match &self.exchange.world {
            Some(w) => (w.replica_offset(), w.total_replicas()),
            None => (0, self.cfg().devices.len()),
        }
    }
}
