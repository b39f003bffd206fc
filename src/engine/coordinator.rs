//! The coordinator thread: dispatches shards to the workers, allreduces the gradients, applies
//! the SGD step to every replica, evaluates at epoch ends, applies controls at step boundaries
//! and reports everything as events.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::Tensor;

use super::allreduce::allreduce_sum;
use super::config::{check_lr, TrainConfig};
use super::events::{
    Control, EpochStats, Event, FinishReason, ReplicaTiming, RunInfo, StepStats, StepTiming, Summary,
};
use super::shard::shards;
use super::worker::{FromWorker, ReplicaHandles, Sums, ToWorker};
use super::{save_named, EngineError, Outcome};

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

/// Statistics gathered between two reports (or over an epoch).
#[derive(Default)]
struct Window {
    sums: Sums,
    steps: usize,
    timing: StepTiming,
    replicas: Vec<ReplicaTiming>,
    started: Option<Instant>,
    paused: Duration,
}

impl Window {
    fn new(replicas: usize) -> Self {
        Window {
            replicas: vec![ReplicaTiming::default(); replicas],
            started: Some(Instant::now()),
            ..Window::default()
        }
    }

    fn seconds(&self) -> f64 {
        self.started.map_or(0.0, |t| t.elapsed().saturating_sub(self.paused).as_secs_f64())
    }
}

pub struct Coordinator {
    cfg: TrainConfig,
    train_len: usize,
    test_len: usize,
    param_count: i64,
    events: Sender<Event>,
    controls: Receiver<Control>,
    to_workers: Vec<Sender<ToWorker>>,
    from_workers: Receiver<FromWorker>,
    threads: Vec<JoinHandle<()>>,
    params: Vec<Tensor>,
    grads: Vec<Tensor>,
    buffers: Vec<Tensor>,
    momentum: Vec<Tensor>,
    named: Vec<(String, Tensor)>,
    lr: f64,
    paused: bool,
    stop: bool,
    global_step: usize,
    window: Window,
    epoch: Window,
}

/// What the coordinator is built from.
pub struct CoordinatorParts {
    pub cfg: TrainConfig,
    pub train_len: usize,
    pub test_len: usize,
    pub param_count: i64,
    pub events: Sender<Event>,
    pub controls: Receiver<Control>,
    pub to_workers: Vec<Sender<ToWorker>>,
    pub from_workers: Receiver<FromWorker>,
    pub threads: Vec<JoinHandle<()>>,
}

impl Coordinator {
    pub fn new(p: CoordinatorParts) -> Self {
        let k = p.cfg.devices.len();
        Coordinator {
            lr: p.cfg.sgd.lr,
            cfg: p.cfg,
            train_len: p.train_len,
            test_len: p.test_len,
            param_count: p.param_count,
            events: p.events,
            controls: p.controls,
            to_workers: p.to_workers,
            from_workers: p.from_workers,
            threads: p.threads,
            params: Vec::new(),
            grads: Vec::new(),
            buffers: Vec::new(),
            momentum: Vec::new(),
            named: Vec::new(),
            paused: false,
            stop: false,
            global_step: 0,
            window: Window::new(k),
            epoch: Window::new(k),
        }
    }

    /// Runs the whole training, then shuts the workers down whatever happened.
    pub fn run(mut self) -> Result<Outcome, EngineError> {
        let result = self.wait_ready().and_then(|()| self.train());
        if let Err(e) = &result {
            let (replica, device) = match e {
                EngineError::Worker { replica, device, .. } => (Some(*replica), Some(device.clone())),
                _ => (None, None),
            };
            self.emit(Event::Failed { replica, device, message: e.to_string() });
        }
        self.shutdown();
        result
    }

    fn emit(&self, event: Event) {
        // A consumer that has gone away must not stop training.
        let _ = self.events.send(event);
    }

    fn worker_error(&self, replica: usize, message: String) -> EngineError {
        EngineError::Worker { replica, device: self.cfg.devices[replica].to_string(), message }
    }

    fn recv(&self) -> Result<FromWorker, EngineError> {
        match self.from_workers.recv() {
            Ok(FromWorker::Failed { replica, message }) => Err(self.worker_error(replica, message)),
            Ok(msg) => Ok(msg),
            Err(_) => Err(EngineError::WorkersGone),
        }
    }

    fn wait_ready(&mut self) -> Result<(), EngineError> {
        let k = self.cfg.devices.len();
        let mut handles: Vec<Option<ReplicaHandles>> = (0..k).map(|_| None).collect();
        for _ in 0..k {
            if let FromWorker::Ready { replica, handles: h } = self.recv()? {
                handles[replica] = Some(*h);
            }
        }
        for (i, h) in handles.into_iter().enumerate() {
            let h = h.ok_or_else(|| self.worker_error(i, "did not start".into()))?;
            self.momentum.push(h.params.zeros_like());
            self.params.push(h.params);
            self.grads.push(h.grads);
            self.buffers.push(h.buffers);
            if i == 0 {
                self.named = h.named_params.into_iter().chain(h.named_buffers).collect();
            }
        }
        Ok(())
    }

    fn train(&mut self) -> Result<Outcome, EngineError> {
        let k = self.cfg.devices.len();
        let steps_per_epoch = self.cfg.steps_per_epoch(self.train_len);
        let devices: Vec<String> = self.cfg.devices.iter().map(ToString::to_string).collect();
        self.emit(Event::Started(Box::new(RunInfo {
            model: self.cfg.model.name().to_owned(),
            devices: devices.clone(),
            param_count: self.param_count,
            epochs: self.cfg.epochs,
            steps_per_epoch,
            batch_size: self.cfg.batch_size,
            lr: self.lr,
            momentum: self.cfg.sgd.momentum,
            weight_decay: self.cfg.sgd.weight_decay,
            train_samples: self.train_len,
            test_samples: self.test_len,
            cpu_threads_per_replica: self.cfg.cpu_threads,
        })));
        let mut last_test_acc = None;
        let (mut epochs_done, mut train_secs, mut samples_done) = (0usize, 0.0f64, 0.0f64);
        let mut reason = FinishReason::Completed;
        'epochs: for epoch in 0..self.cfg.epochs {
            let order = Arc::new(epoch_order(self.cfg.seed, epoch, self.train_len));
            for tx in &self.to_workers {
                tx.send(ToWorker::Epoch { order: Arc::clone(&order) })
                    .map_err(|_| EngineError::WorkersGone)?;
            }
            self.epoch = Window::new(k);
            self.window = Window::new(k);
            for step in 0..steps_per_epoch {
                self.poll_controls()?;
                if self.stop {
                    reason = FinishReason::Stopped;
                    break 'epochs;
                }
                if self.cfg.max_steps.is_some_and(|m| self.global_step >= m) {
                    reason = FinishReason::StepLimit;
                    break 'epochs;
                }
                let start = step * self.cfg.batch_size;
                let len = self.cfg.batch_size.min(self.train_len - start);
                let last = step + 1 == steps_per_epoch;
                let report = last || (step + 1) % self.cfg.log_every == 0;
                self.train_step(start, len, report)?;
                if report {
                    self.report(epoch + 1, step + 1, steps_per_epoch);
                }
            }
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
            last_test_acc = Some(stats.test_acc);
            epochs_done += 1;
            train_secs += epoch_seconds;
            samples_done += train.samples;
            self.emit(Event::Epoch(Box::new(stats)));
        }
        if reason != FinishReason::Completed {
            // The partial epoch counts for throughput.
            train_secs += self.epoch.seconds();
            samples_done += self.epoch.sums.samples + self.window.sums.samples;
        }
        self.save("final")?;
        let summary = Summary {
            model: self.cfg.model.name().to_owned(),
            devices,
            test_acc: last_test_acc,
            sec_per_epoch: (epochs_done > 0).then(|| train_secs / epochs_done as f64),
            samples_per_sec: samples_done / train_secs.max(1e-9),
            epochs_done,
            global_steps: self.global_step,
            reason,
        };
        self.emit(Event::Finished(Box::new(summary.clone())));
        Ok(Outcome { summary, final_params: self.named_cpu() })
    }

    fn named_cpu(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.to_device(tch::Device::Cpu).copy())).collect()
    }

    fn train_step(&mut self, start: usize, len: usize, report: bool) -> Result<(), EngineError> {
        let k = self.cfg.devices.len();
        for (i, (offset, n)) in shards(len, k).into_iter().enumerate() {
            let dropout_seed =
                mix_seed(mix_seed(self.cfg.seed, self.global_step as u64), i as u64 + 1) as i64;
            self.to_workers[i]
                .send(ToWorker::Step { start: start + offset, len: n, dropout_seed, report })
                .map_err(|_| EngineError::WorkersGone)?;
        }
        let (mut data_max, mut compute_max) = (0.0f64, 0.0f64);
        for _ in 0..k {
            if let FromWorker::StepDone { replica, data_secs, compute_secs, sums } = self.recv()? {
                data_max = data_max.max(data_secs);
                compute_max = compute_max.max(compute_secs);
                let r = &mut self.window.replicas[replica];
                r.data += data_secs;
                r.compute += compute_secs;
                if let Some(s) = sums {
                    self.window.sums.loss += s.loss;
                    self.window.sums.correct += s.correct;
                    self.window.sums.samples += s.samples;
                }
            }
        }
        let t = Instant::now();
        let holders = allreduce_sum(&mut self.grads);
        let allreduce = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let sgd = super::sgd::Sgd { lr: self.lr, ..self.cfg.sgd };
        for ((param, momentum), &holder) in self.params.iter_mut().zip(&mut self.momentum).zip(&holders) {
            sgd.step(param, &self.grads[holder], momentum, len);
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
        if self.cfg.check_replicas {
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

    fn report(&mut self, epoch: usize, step: usize, steps_per_epoch: usize) {
        let w = std::mem::replace(&mut self.window, Window::new(self.cfg.devices.len()));
        let n = w.steps.max(1) as f64;
        let per = |x: f64| x / n;
        let stats = StepStats {
            epoch,
            step,
            steps_per_epoch,
            global_step: self.global_step,
            loss: w.sums.loss / w.sums.samples.max(1.0),
            acc: w.sums.correct / w.sums.samples.max(1.0),
            lr: self.lr,
            samples_per_sec: w.sums.samples / w.seconds().max(1e-9),
            timing: StepTiming {
                data: per(w.timing.data),
                compute: per(w.timing.compute),
                allreduce: per(w.timing.allreduce),
                update: per(w.timing.update),
            },
            replicas: w
                .replicas
                .iter()
                .map(|r| ReplicaTiming { data: per(r.data), compute: per(r.compute) })
                .collect(),
        };
        self.epoch.sums.loss += w.sums.loss;
        self.epoch.sums.correct += w.sums.correct;
        self.epoch.sums.samples += w.sums.samples;
        self.emit(Event::Step(Box::new(stats)));
    }

    fn evaluate(&mut self) -> Result<Sums, EngineError> {
        let k = self.cfg.devices.len();
        for (i, (start, len)) in shards(self.test_len, k).into_iter().enumerate() {
            self.to_workers[i]
                .send(ToWorker::Evaluate { start, len })
                .map_err(|_| EngineError::WorkersGone)?;
        }
        let mut total = Sums::default();
        for _ in 0..k {
            if let FromWorker::Evaluated { sums, .. } = self.recv()? {
                total.loss += sums.loss;
                total.correct += sums.correct;
                total.samples += sums.samples;
            }
        }
        Ok(total)
    }

    /// Applies every pending control; while paused, waits for the next one (no busy loop).
    fn poll_controls(&mut self) -> Result<(), EngineError> {
        loop {
            let control = if self.paused {
                let waited = Instant::now();
                let c = self.controls.recv();
                let idle = waited.elapsed();
                self.window.paused += idle;
                self.epoch.paused += idle;
                match c {
                    Ok(c) => c,
                    // Nobody can resume us any more: carry on rather than hang.
                    Err(_) => Control::Resume,
                }
            } else {
                match self.controls.try_recv() {
                    Ok(c) => c,
                    Err(_) => return Ok(()),
                }
            };
            self.apply(control)?;
            if self.stop {
                return Ok(());
            }
        }
    }

    fn apply(&mut self, control: Control) -> Result<(), EngineError> {
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
                if let Err(e) = self.save("requested") {
                    // A failed save must not end the run; the user hears about it.
                    self.emit(Event::Warning { message: e.to_string() });
                }
            }
            Control::Stop => {
                if !self.stop {
                    self.emit(Event::StopRequested { global_step });
                }
                self.stop = true;
            }
        }
        Ok(())
    }

    /// Writes the weights of replica 0 into the run directory (nothing without one).
    fn save(&self, _why: &str) -> Result<(), EngineError> {
        let Some(dir) = &self.cfg.run_dir else {
            return Ok(());
        };
        let path: PathBuf = dir.join("model.safetensors");
        save_named(&self.named_cpu(), &path)?;
        self.emit(Event::Saved { path: path.display().to_string(), global_step: self.global_step });
        Ok(())
    }

    fn shutdown(&mut self) {
        for tx in &self.to_workers {
            let _ = tx.send(ToWorker::Shutdown);
        }
        self.to_workers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
