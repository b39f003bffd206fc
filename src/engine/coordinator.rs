//! The coordinator thread: dispatches shards to the workers, allreduces the gradients, applies
//! the SGD step to every replica, evaluates at epoch ends, applies controls at step boundaries,
//! writes checkpoints and reports everything as events.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::Tensor;

use super::allreduce::allreduce_sum;
use super::checkpoint::PartialEpoch;
use super::config::{check_lr, OnNan, TrainConfig};
use super::events::{Control, EpochStats, Event, FinishReason, RunInfo, Summary};
use super::flat::Layout;
use super::sgd::StepScalars;
use super::shard::shards;
use super::window::Window;
use super::worker::{FromWorker, ReplicaHandles, Sums, ToWorker};
use super::{EngineError, Outcome};
use crate::model::TensorSpec;

mod persist;

/// SplitMix64: derives independent seeds (shuffles, dropout streams) from the run's seed.
pub fn mix_seed(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The order in which epoch `epoch` visits the `n` training samples.
pub fn epoch_order(seed: u64, epoch: usize, n: usize) -> Vec<i64> {
    let mut order: Vec<i64> = (0..n as i64).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix_seed(seed, epoch as u64)));
    order
}

/// Work slower than a training step (start-up, evaluation) gets this many step timeouts.
const SLOW_WORK_FACTOR: u32 = 10;
/// How long shutting down waits for the worker threads to leave.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// What the coordinator is built from.
pub struct CoordinatorParts {
    pub cfg: TrainConfig,
    pub train_len: usize,
    pub test_len: usize,
    pub param_specs: Vec<TensorSpec>,
    pub buffer_specs: Vec<TensorSpec>,
    pub param_layout: Layout,
    pub buffer_layout: Layout,
    pub events: Sender<Event>,
    pub controls: Receiver<Control>,
    pub to_workers: Vec<Sender<ToWorker>>,
    pub from_workers: Receiver<FromWorker>,
    pub threads: Vec<JoinHandle<()>>,
    /// Disconnects once every worker thread has ended.
    pub workers_alive: Receiver<()>,
}

/// The totals of finished epochs, for the summary.
#[derive(Default)]
struct Totals {
    epochs_done: usize,
    train_seconds: f64,
    samples: f64,
    last_test_acc: Option<f64>,
}

pub struct Coordinator {
    p: CoordinatorParts,
    params: Vec<Tensor>,
    grads: Vec<Tensor>,
    buffers: Vec<Tensor>,
    momentum: Vec<Tensor>,
    scalars: Vec<StepScalars>,
    named: Vec<(String, Tensor)>,
    lr: f64,
    paused: bool,
    stop: bool,
    diverged: bool,
    nan_warned: bool,
    global_step: usize,
    window: Window,
    epoch: Window,
    totals: Totals,
    history: Vec<Event>,
}

impl Coordinator {
    pub fn new(p: CoordinatorParts) -> Self {
        let k = p.cfg.devices.len();
        Coordinator {
            lr: p.cfg.sgd.lr,
            params: Vec::new(),
            grads: Vec::new(),
            buffers: Vec::new(),
            momentum: Vec::new(),
            scalars: Vec::new(),
            named: Vec::new(),
            paused: false,
            stop: false,
            diverged: false,
            nan_warned: false,
            global_step: 0,
            window: Window::new(k),
            epoch: Window::new(k),
            totals: Totals::default(),
            history: Vec::new(),
            p,
        }
    }

    fn cfg(&self) -> &TrainConfig {
        &self.p.cfg
    }

    /// Runs the whole training, then shuts the workers down whatever happened.
    pub fn run(mut self) -> Result<Outcome, EngineError> {
        let result = self.wait_ready().and_then(|()| self.train());
        if let Err(e) = &result {
            let (replica, device) = match e {
                EngineError::Worker { replica, device, .. } => (Some(*replica), Some(device.clone())),
                EngineError::Stalled { replicas, .. } => {
                    (replicas.first().copied(), replicas.first().map(|&r| self.cfg().devices[r].to_string()))
                }
                _ => (None, None),
            };
            self.emit(Event::Failed { replica, device, message: e.to_string() });
        }
        self.shutdown();
        result
    }

    fn emit(&mut self, event: Event) {
        if matches!(event, Event::Step(_) | Event::Epoch(_) | Event::LrChanged { .. } | Event::Paused { .. })
        {
            self.history.push(event.clone());
        }
        // A consumer that has gone away must not stop training.
        let _ = self.p.events.send(event);
    }

    fn worker_error(&self, replica: usize, message: String) -> EngineError {
        EngineError::Worker { replica, device: self.cfg().devices[replica].to_string(), message }
    }

    /// Sends `cmd(replica)` to every worker.
    fn broadcast(&self, cmd: impl Fn(usize) -> ToWorker) -> Result<(), EngineError> {
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

    fn wait_ready(&mut self) -> Result<(), EngineError> {
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
        if let Some(r) = &self.p.cfg.resume {
            for m in &self.momentum {
                self.p.param_layout.load_logical(m, &r.momentum);
            }
        }
        Ok(())
    }

    fn run_info(&self, steps_per_epoch: usize) -> RunInfo {
        let cfg = self.cfg();
        RunInfo {
            model: cfg.model.name().to_owned(),
            devices: cfg.devices.iter().map(ToString::to_string).collect(),
            param_count: self.p.param_specs.iter().map(TensorSpec::numel).sum(),
            epochs: cfg.epochs,
            steps_per_epoch,
            batch_size: cfg.batch_size,
            lr: self.lr,
            momentum: cfg.sgd.momentum,
            weight_decay: cfg.sgd.weight_decay,
            train_samples: self.p.train_len,
            test_samples: self.p.test_len,
            cpu_threads_per_replica: cfg.cpu_threads,
            resumed_at: cfg.resume.as_ref().map(|r| r.state.global_step),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs_f64()),
        }
    }

    fn train(&mut self) -> Result<Outcome, EngineError> {
        let k = self.cfg().devices.len();
        let steps_per_epoch = self.cfg().steps_per_epoch(self.p.train_len);
        let (mut start_epoch, mut start_step, mut partial) = (0, 0, PartialEpoch::default());
        let restored = self.p.cfg.resume.as_ref().map(|r| r.state.clone());
        if let Some(s) = &restored {
            (start_epoch, start_step, partial) = (s.epoch, s.step, s.partial_epoch);
            self.global_step = s.global_step;
            self.lr = s.lr;
            self.totals = Totals {
                epochs_done: s.epochs_done,
                train_seconds: s.train_seconds,
                samples: s.samples_done,
                last_test_acc: s.last_test_acc,
            };
        }
        let info = self.run_info(steps_per_epoch);
        self.emit(Event::Started(Box::new(info)));
        if let Some(s) = restored {
            self.history = s.history.clone();
            let (epoch, step, global_step) = (s.epoch, s.step, s.global_step);
            let _ = self.p.events.send(Event::Restored { epoch, step, global_step, history: s.history });
        }
        let mut reason = FinishReason::Completed;
        let mut position = (start_epoch, start_step);
        'epochs: for epoch in start_epoch..self.cfg().epochs {
            let order = Arc::new(epoch_order(self.cfg().seed, epoch, self.p.train_len));
            self.broadcast(|_| ToWorker::Epoch { order: Arc::clone(&order) })?;
            let first = if epoch == start_epoch { start_step } else { 0 };
            self.epoch = Window::new(k);
            if epoch == start_epoch {
                self.epoch.add(Sums {
                    loss: partial.loss,
                    correct: partial.correct,
                    samples: partial.samples,
                });
                self.epoch.carried_seconds = partial.seconds;
            }
            self.window = Window::new(k);
            for step in first..steps_per_epoch {
                position = (epoch, step);
                self.poll_controls()?;
                if self.stop {
                    reason = if self.diverged { FinishReason::Diverged } else { FinishReason::Stopped };
                    break 'epochs;
                }
                if self.cfg().max_steps.is_some_and(|m| self.global_step >= m) {
                    reason = FinishReason::StepLimit;
                    break 'epochs;
                }
                let start = step * self.cfg().batch_size;
                let len = self.cfg().batch_size.min(self.p.train_len - start);
                let last = step + 1 == steps_per_epoch;
                self.train_step(start, len)?;
                if last || (step + 1) % self.cfg().log_every == 0 {
                    self.report(epoch + 1, step + 1, steps_per_epoch)?;
                }
            }
            self.end_epoch(epoch)?;
            position = (epoch + 1, 0);
            let every = self.cfg().checkpoint_every;
            if every > 0 && (epoch + 1) % every == 0 && epoch + 1 < self.cfg().epochs {
                self.checkpoint(position);
            }
        }
        if reason != FinishReason::Completed {
            // Statistics of the partial window, so the curves and the checkpoint include them.
            if self.window.steps > 0 {
                self.report(position.0 + 1, position.1, steps_per_epoch)?;
            }
        }
        if !self.diverged {
            self.save();
            self.checkpoint(position);
        }
        let summary = self.summary(reason, position);
        self.emit(Event::Finished(Box::new(summary.clone())));
        Ok(Outcome { summary, final_params: self.named_cpu() })
    }

    fn summary(&self, reason: FinishReason, position: (usize, usize)) -> Summary {
        let t = &self.totals;
        // A partial epoch counts for throughput.
        let (secs, samples) = if position.1 > 0 {
            (t.train_seconds + self.epoch.seconds(), t.samples + self.epoch.sums.samples)
        } else {
            (t.train_seconds, t.samples)
        };
        Summary {
            model: self.cfg().model.name().to_owned(),
            devices: self.cfg().devices.iter().map(ToString::to_string).collect(),
            test_acc: t.last_test_acc,
            sec_per_epoch: (t.epochs_done > 0).then(|| t.train_seconds / t.epochs_done as f64),
            samples_per_sec: samples / secs.max(1e-9),
            epochs_done: t.epochs_done,
            global_steps: self.global_step,
            reason,
        }
    }

    fn end_epoch(&mut self, epoch: usize) -> Result<(), EngineError> {
        let epoch_seconds = self.epoch.seconds();
        let eval_start = Instant::now();
        let test = self.evaluate()?;
        let train = self.epoch.sums;
        let stats = EpochStats {
            epoch: epoch + 1,
            train_loss: train.loss / train.samples.max(1.0),
            train_acc: train.correct / train.samples.max(1.0),
            test_loss: test.loss / test.samples.max(1.0),
            test_acc: test.correct / test.samples.max(1.0),
            epoch_seconds,
            eval_seconds: eval_start.elapsed().as_secs_f64(),
            samples_per_sec: train.samples / epoch_seconds.max(1e-9),
            lr: self.lr,
        };
        self.totals.last_test_acc = Some(stats.test_acc);
        self.totals.epochs_done += 1;
        self.totals.train_seconds += epoch_seconds;
        self.totals.samples += train.samples;
        self.emit(Event::Epoch(Box::new(stats)));
        Ok(())
    }

    fn named_cpu(&self) -> Vec<(String, Tensor)> {
        self.named
            .iter()
            .map(|(n, t)| (n.clone(), t.to_device(tch::Device::Cpu).contiguous().copy()))
            .collect()
    }

    fn train_step(&mut self, start: usize, len: usize) -> Result<(), EngineError> {
        let (seed, global_step) = (self.cfg().seed, self.global_step);
        let parts = shards(len, self.cfg().devices.len());
        self.broadcast(|i| ToWorker::Step {
            start: start + parts[i].0,
            len: parts[i].1,
            global_step,
            dropout_seed: mix_seed(mix_seed(seed, global_step as u64), i as u64 + 1) as i64,
        })?;
        let (mut data_max, mut compute_max) = (0.0f64, 0.0f64);
        for reply in self.gather(self.cfg().step_timeout)? {
            if let FromWorker::StepDone { replica, data_secs, compute_secs } = reply {
                data_max = data_max.max(data_secs);
                compute_max = compute_max.max(compute_secs);
                let r = &mut self.window.replicas[replica];
                r.data += data_secs;
                r.compute += compute_secs;
            }
        }
        let t = Instant::now();
        let holders = allreduce_sum(&mut self.grads);
        let allreduce = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let sgd = super::sgd::Sgd { lr: self.lr, ..self.cfg().sgd };
        for (((param, momentum), scalars), &holder) in
            self.params.iter_mut().zip(&mut self.momentum).zip(&mut self.scalars).zip(&holders)
        {
            sgd.step(param, &self.grads[holder], momentum, len, scalars);
        }
        if let Some((first, rest)) = self.buffers.split_first_mut() {
            for b in rest {
                b.copy_(first);
            }
        }
        let update = t.elapsed().as_secs_f64();
        self.global_step += 1;
        let w = &mut self.window;
        w.steps += 1;
        w.timing.data += data_max;
        w.timing.compute += compute_max;
        w.timing.allreduce += allreduce;
        w.timing.update += update;
        if self.cfg().check_replicas {
            self.check_replicas()?;
        }
        Ok(())
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

    /// Reads the workers' metric sums (one device sync each) and reports the window.
    fn report(&mut self, epoch: usize, step: usize, steps_per_epoch: usize) -> Result<(), EngineError> {
        self.broadcast(|_| ToWorker::Report)?;
        for reply in self.gather(self.cfg().step_timeout)? {
            if let FromWorker::Sums { sums, .. } = reply {
                self.window.add(sums);
            }
        }
        let k = self.cfg().devices.len();
        let w = std::mem::replace(&mut self.window, Window::new(k));
        let stats = w.stats(epoch, step, steps_per_epoch, self.global_step, self.lr);
        self.epoch.add(w.sums);
        let finite = stats.loss.is_finite();
        self.emit(Event::Step(Box::new(stats)));
        if !finite {
            self.on_nan();
        }
        Ok(())
    }

    fn on_nan(&mut self) {
        let at = self.global_step;
        match self.cfg().on_nan {
            OnNan::Ignore => {
                if !self.nan_warned {
                    self.nan_warned = true;
                    self.emit(Event::Warning {
                        message: format!("the loss is not finite at step {at} (--on-nan ignore)"),
                    });
                }
            }
            OnNan::Pause => {
                self.emit(Event::Warning {
                    message: format!(
                        "the loss is not finite at step {at}: paused; the last good checkpoint is in the run directory (--resume it, with a lower --lr)"
                    ),
                });
                if !self.paused {
                    self.paused = true;
                    self.emit(Event::Paused { global_step: at });
                }
            }
            OnNan::Stop => {
                self.emit(Event::Warning {
                    message: format!(
                        "the loss is not finite at step {at}: stopping; the last good checkpoint is kept"
                    ),
                });
                self.diverged = true;
                self.stop = true;
            }
        }
    }

    fn evaluate(&mut self) -> Result<Sums, EngineError> {
        let parts = shards(self.p.test_len, self.cfg().devices.len());
        self.broadcast(|i| ToWorker::Evaluate { start: parts[i].0, len: parts[i].1 })?;
        let mut total = Sums::default();
        for reply in self.gather(self.slow_timeout())? {
            if let FromWorker::Evaluated { sums, .. } = reply {
                total.add(sums);
            }
        }
        Ok(total)
    }

    /// Applies every pending control; while paused, waits for the next one (no busy loop).
    fn poll_controls(&mut self) -> Result<(), EngineError> {
        loop {
            let control = if self.paused {
                let waited = Instant::now();
                let c = self.p.controls.recv();
                let idle = waited.elapsed();
                self.window.paused += idle;
                self.epoch.paused += idle;
                // Nobody can resume us any more: carry on rather than hang.
                c.unwrap_or(Control::Resume)
            } else {
                match self.p.controls.try_recv() {
                    Ok(c) => c,
                    Err(_) => return Ok(()),
                }
            };
            self.apply(control);
            if self.stop {
                return Ok(());
            }
        }
    }

    fn apply(&mut self, control: Control) {
        let global_step = self.global_step;
        match control {
            Control::Pause if !self.paused => {
                self.paused = true;
                self.emit(Event::Paused { global_step });
            }
            Control::Resume if self.paused => {
                self.paused = false;
                self.emit(Event::Resumed { global_step });
            }
            Control::Pause | Control::Resume => {}
            Control::SetLr { lr } => match check_lr(lr) {
                Ok(lr) => {
                    let from = std::mem::replace(&mut self.lr, lr);
                    self.emit(Event::LrChanged { from, to: lr, global_step });
                }
                Err(e) => self.emit(Event::Refused { reason: e.to_string() }),
            },
            Control::SaveNow => {
                self.save();
                let position = self.position_now();
                self.checkpoint(position);
            }
            Control::Stop => {
                if !self.stop {
                    self.emit(Event::StopRequested { global_step });
                }
                self.stop = true;
            }
        }
    }

    /// Asks every worker to leave and joins those that do within a grace period; a stuck one is
    /// left behind (it ends with the process) rather than hanging the shutdown.
    fn shutdown(&mut self) {
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
