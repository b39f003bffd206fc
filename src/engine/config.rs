//! What one training run is asked to do, and the checks that reject a bad request up front.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::device::DeviceId;
use super::faults::Faults;
use super::optim::schedule::{LrPlan, Schedule};
use super::optim::{OptimConfig, OptimizerKind};
use super::resume::Resume;
use crate::model::script::ScriptModel;
use crate::model::{Builder, LossKind, ModelKind, Normalization, Precision};

pub use super::config_error::ConfigError;
pub use super::policies::{OnNan, SavePolicy};

/// The tensors of `model` (a built-in, or the TorchScript `script`), by name and shape.
pub fn model_specs(model: ModelKind, script: Option<&ScriptModel>) -> Builder {
    let mut b = Builder::default();
    match script {
        Some(s) => {
            b.params = s.params.clone();
            b.buffers = s.buffers.clone();
        }
        None => {
            let _ = model.build(&mut b);
        }
    }
    b
}

/// The first device of `devices` that cannot run `--precision bf16`, by its compute capability
/// (`capability(i)` for `cuda:i`; unknown capabilities pass).
pub fn bf16_problem(
    precision: Precision,
    devices: &[DeviceId],
    capability: impl Fn(usize) -> Option<(i32, i32)>,
) -> Option<ConfigError> {
    if precision != Precision::Bf16 {
        return None;
    }
    devices.iter().find_map(|d| match d {
        DeviceId::Cuda(i) => capability(*i)
            .filter(|(major, _)| *major < 8)
            .map(|(major, minor)| ConfigError::Bf16Unsupported { device: d.to_string(), major, minor }),
        DeviceId::Cpu => None,
    })
}

/// Checks a learning rate given on the command line or at run time.
pub fn check_lr(lr: f64) -> Result<f64, ConfigError> {
    if lr.is_finite() && lr > 0.0 {
        Ok(lr)
    } else {
        Err(ConfigError::BadLr(lr))
    }
}

/// Everything a run needs besides the data.
#[derive(Debug)]
pub struct TrainConfig {
    pub model: ModelKind,
    pub devices: Vec<DeviceId>,
    pub epochs: usize,
    /// Global batch, split over the replicas.
    pub batch_size: usize,
    /// The optimizer; its `lr` is the base of the schedule.
    pub optim: OptimConfig,
    pub schedule: Schedule,
    /// Linear scaling rule: the schedule's base is `optim.lr × batch_size / this`.
    pub lr_batch_ref: Option<usize>,
    pub seed: u64,
    /// Report training statistics (a device sync) every this many steps, and at epoch ends.
    pub log_every: usize,
    /// Where weights are saved; `None` saves nothing.
    pub run_dir: Option<PathBuf>,
    /// End the run after this many steps in all.
    pub max_steps: Option<usize>,
    /// Compare every replica's parameters with replica 0's after each step (slow; for tests).
    pub check_replicas: bool,
    /// Intra-op threads of each CPU replica.
    pub cpu_threads: usize,
    /// The streaming loader's queue depth and decode threads (streamed data only).
    pub loader: super::loader::LoaderConfig,
    /// When periodic checkpoints are written (0 of anything: only on stop and at the end).
    pub checkpoint_every: super::checkpoint_every::CheckpointEvery,
    /// How many of the newest checkpoints to keep under `checkpoints/` (1: only
    /// `checkpoint.safetensors`).
    pub keep_checkpoints: usize,
    pub on_nan: OnNan,
    pub save_policy: SavePolicy,
    /// A replica that does not finish a step within this time is reported as stuck.
    pub step_timeout: Duration,
    /// Continue from a checkpoint.
    pub resume: Option<Box<Resume>>,
    /// Test-only fault injection.
    pub faults: Faults,
    /// Channels-last convolution weights (`None`: the model's measured preference).
    pub channels_last: Option<bool>,
    /// The gradient buckets' cap in MiB when the allreduce overlaps the backward pass (DDP's
    /// `bucket_cap_mb`); 0: the gradients are reduced after the backward pass.
    pub bucket_cap_mb: f64,
    pub precision: Precision,
    /// The other processes of a multi-process run (`None`: this process alone).
    pub world: Option<Box<crate::dist::World>>,
    /// The user's TorchScript model, when `model` is `ModelKind::Script`.
    pub script: Option<Arc<ScriptModel>>,
    pub loss: LossKind,
    /// Label smoothing of the training loss (`F.cross_entropy(label_smoothing=)`).
    pub label_smoothing: f64,
    /// Keep this many best evaluations as checkpoints under `best/` (0: none).
    pub keep_best: usize,
    /// What "best" means for `keep_best` and `early_stop`.
    pub best_metric: super::best::BestMetric,
    /// Stop after this many evaluations without improvement.
    pub early_stop: Option<usize>,
    /// Weights to start from (`--init-from`), loaded by name.
    pub init_from: Option<Box<super::init_from::InitFrom>>,
    /// Decay of the weights' moving average (`--ema`).
    pub ema: Option<f64>,
    /// Micro-batches each replica splits its share of a step into (gradient accumulation).
    pub accumulate: usize,
    /// Clip the mean gradient's global L2 norm to this (`clip_grad_norm_`).
    pub clip_grad_norm: Option<f64>,
    /// Training-time augmentation (`--augment`).
    pub augment: super::augment::Augment,
    /// The data the run trains on, as given (kept in checkpoints).
    pub data: crate::data::DataSettings,
    /// Set when this attempt continues the run in its directory (the same command again).
    pub restart: Option<crate::record::stats::Restart>,
    /// Dynamic loss scaling (GradScaler's rules), for float16.
    pub loss_scale: Option<super::optim::loss_scale::LossScaling>,
    /// Input normalization: `(x / 255 - mean) / std`.
    pub normalization: Normalization,
}

impl TrainConfig {
    /// The reference programs' settings for `model` on `devices`, with RNG seed 0.
    pub fn new(model: ModelKind, devices: Vec<DeviceId>) -> Self {
        let d = model.defaults();
        TrainConfig {
            model,
            devices,
            epochs: d.epochs,
            batch_size: d.batch_size,
            optim: OptimConfig::sgd(d.lr, d.momentum, 0.0),
            schedule: Schedule::default(),
            lr_batch_ref: None,
            seed: 0,
            log_every: 50,
            run_dir: None,
            max_steps: None,
            check_replicas: false,
            cpu_threads: 1,
            loader: Default::default(),
            checkpoint_every: Default::default(),
            keep_checkpoints: 1,
            on_nan: OnNan::Stop,
            save_policy: SavePolicy::Retry { tries: 0, every: Duration::ZERO },
            step_timeout: Duration::from_secs(600),
            resume: None,
            faults: Faults::default(),
            channels_last: None,
            bucket_cap_mb: 25.0,
            precision: Precision::F32,
            world: None,
            script: None,
            loss: model.loss(),
            label_smoothing: 0.0,
            accumulate: 1,
            ema: None,
            keep_best: 0,
            best_metric: super::best::BestMetric::ValAcc,
            early_stop: None,
            init_from: None,
            clip_grad_norm: None,
            loss_scale: None,
            restart: None,
            data: Default::default(),
            augment: Default::default(),
            normalization: model.normalization(),
        }
    }

    /// A run of the user's TorchScript `script` (loss and normalization from the caller).
    pub fn for_script(script: Arc<ScriptModel>, devices: Vec<DeviceId>) -> Self {
        TrainConfig { script: Some(script), ..TrainConfig::new(ModelKind::Script, devices) }
    }

    /// The tensors the model trains and keeps, by name and shape, in the engine's order.
    pub fn specs(&self) -> Builder {
        model_specs(self.model, self.script.as_deref())
    }

    /// Rejects settings the GPUs cannot run (asks CUDA for their compute capability).
    pub fn validate_devices(&self) -> Result<(), ConfigError> {
        let capability = |i: usize| crate::dist::c10d::cuda_identity(i).ok().map(|id| (id.major, id.minor));
        match bf16_problem(self.precision, &self.devices, capability) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The schedule's base rate: `--lr`, scaled with the global batch when asked.
    pub fn base_lr(&self) -> f64 {
        match self.lr_batch_ref {
            Some(r) if r > 0 => self.optim.lr * self.batch_size as f64 / r as f64,
            _ => self.optim.lr,
        }
    }

    /// The learning rate over the run's steps, on `train_len` samples.
    pub fn lr_plan(&self, train_len: usize) -> LrPlan {
        let steps_per_epoch = self.steps_per_epoch(train_len);
        LrPlan {
            base: self.base_lr(),
            schedule: self.schedule.clone(),
            total: steps_per_epoch * self.epochs,
            steps_per_epoch,
            scale: 1.0,
        }
    }

    /// Rejects settings that cannot train, given the data's size (without touching CUDA).
    pub fn validate(&self, train_len: usize, test_len: usize) -> Result<(), ConfigError> {
        self.validate_settings()?;
        let plan = self.lr_plan(train_len);
        self.schedule.check(plan.base, plan.total)?;
        if train_len == 0 {
            return Err(ConfigError::EmptyTrainSet);
        }
        if test_len == 0 {
            return Err(ConfigError::EmptyTestSet);
        }
        if let Some(r) = &self.resume {
            if r.state.train_samples != train_len {
                return Err(ConfigError::ResumeSamples {
                    checkpoint: r.state.train_samples,
                    found: train_len,
                });
            }
        }
        Ok(())
    }

    /// Rejects settings that cannot train, before the data is loaded.
    pub fn validate_settings(&self) -> Result<(), ConfigError> {
        if self.batch_size == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if self.batch_size < self.devices.len() {
            return Err(ConfigError::BatchSmallerThanReplicas {
                batch: self.batch_size,
                replicas: self.devices.len(),
            });
        }
        let o = &self.optim;
        check_lr(o.lr)?;
        if !(o.momentum.is_finite() && (0.0..1.0).contains(&o.momentum)) {
            return Err(ConfigError::BadMomentum(o.momentum));
        }
        if o.nesterov && (o.kind != OptimizerKind::Sgd || o.momentum == 0.0) {
            return Err(ConfigError::NesterovWithoutMomentum);
        }
        if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
            return Err(ConfigError::BadWeightDecay(o.weight_decay));
        }
        let (b1, b2) = o.betas;
        if ![b1, b2].iter().all(|b| b.is_finite() && (0.0..1.0).contains(b)) {
            return Err(ConfigError::BadBetas(b1, b2));
        }
        if !(o.eps.is_finite() && o.eps > 0.0) {
            return Err(ConfigError::BadEps(o.eps));
        }
        if !(self.label_smoothing.is_finite() && (0.0..1.0).contains(&self.label_smoothing)) {
            return Err(ConfigError::BadLabelSmoothing(self.label_smoothing));
        }
        if let Some(d) = self.ema.filter(|d| !(d.is_finite() && *d > 0.0 && *d < 1.0)) {
            return Err(ConfigError::BadEma(d));
        }
        if self.early_stop == Some(0) {
            return Err(ConfigError::ZeroPatience);
        }
        if self.accumulate == 0 {
            return Err(ConfigError::ZeroAccumulate);
        }
        let per_replica = self.batch_size / self.devices.len().max(1);
        if self.accumulate > per_replica {
            return Err(ConfigError::AccumulateTooFine { accumulate: self.accumulate, per_replica });
        }
        if let Some(c) = self.clip_grad_norm.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(ConfigError::BadClip(c));
        }
        if self.epochs == 0 {
            return Err(ConfigError::ZeroEpochs);
        }
        if self.log_every == 0 {
            return Err(ConfigError::ZeroLogEvery);
        }
        if self.step_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.model == ModelKind::Script && self.script.is_none() {
            return Err(ConfigError::ScriptMissing);
        }
        if self.model == ModelKind::Script && self.precision != Precision::F32 {
            return Err(ConfigError::ScriptLowPrecision(self.precision.name()));
        }
        if let Some(l) = self.loss_scale.filter(|l| !l.valid()) {
            return Err(ConfigError::BadLossScale { init: l.init, interval: l.growth_interval });
        }
        let n = &self.normalization;
        let good = !n.mean.is_empty()
            && n.std.len() == n.mean.len()
            && n.mean.iter().all(|m| m.is_finite())
            && n.std.iter().all(|s| s.is_finite() && *s > 0.0);
        if !good {
            return Err(ConfigError::BadNormalization(format!("{:?} / {:?}", n.mean, n.std)));
        }
        if let Some(r) = &self.resume {
            if r.state.batch_size != self.batch_size {
                return Err(ConfigError::ResumeBatch {
                    checkpoint: r.state.batch_size,
                    asked: self.batch_size,
                });
            }
            if r.state.epoch >= self.epochs {
                return Err(ConfigError::ResumeDone { done: r.state.epoch, epochs: self.epochs });
            }
        }
        Ok(())
    }

    /// Whether convolution weights are laid out channels-last in this run.
    /// The flat buffers share one layout across replicas (the allreduce sums them element by
    /// element), so the model's preference must hold on every device, not just the first.
    pub fn uses_channels_last(&self) -> bool {
        self.channels_last.unwrap_or_else(|| {
            self.devices.iter().all(|d| self.model.prefers_channels_last(matches!(d, DeviceId::Cuda(_))))
        })
    }

    /// The gradient buckets' byte limits (the first, the others) when the allreduce overlaps
    /// the backward pass: with a cap, and gradients to reduce (two replicas or more, or other
    /// processes); the first bucket is DDP's 1 MiB unless the cap is smaller.
    pub fn bucket_bytes(&self, other_processes: bool) -> Option<(i64, i64)> {
        let cap = (self.bucket_cap_mb * (1u64 << 20) as f64) as i64;
        let reduces = self.devices.len() > 1 || other_processes;
        (cap > 0 && reduces).then(|| (super::buckets::FIRST_BUCKET_BYTES.min(cap), cap))
    }

    /// Whether any replica runs on a GPU.
    pub fn has_gpu(&self) -> bool {
        self.devices.iter().any(|d| matches!(d, DeviceId::Cuda(_)))
    }

    /// Steps in one epoch (the last partial batch is kept).
    pub fn steps_per_epoch(&self, train_len: usize) -> usize {
        train_len.div_ceil(self.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_must_suit_every_device() {
        let cfg = |devices: Vec<DeviceId>| TrainConfig::new(ModelKind::Resnet18, devices);
        assert!(cfg(vec![DeviceId::Cuda(0), DeviceId::Cuda(1)]).uses_channels_last());
        assert!(
            !cfg(vec![DeviceId::Cuda(0), DeviceId::Cpu]).uses_channels_last(),
            "not from the first device alone"
        );
        assert!(!cfg(vec![DeviceId::Cpu, DeviceId::Cuda(0)]).uses_channels_last());
        let mut forced = cfg(vec![DeviceId::Cpu]);
        forced.channels_last = Some(true);
        assert!(forced.uses_channels_last(), "--channels-last on wins");
    }

    #[test]
    fn bf16_needs_ampere_or_newer() {
        let caps = |i: usize| Some(if i == 0 { (9, 0) } else { (7, 5) });
        let gpus = [DeviceId::Cuda(0), DeviceId::Cuda(1)];
        let e = bf16_problem(Precision::Bf16, &gpus, caps).expect("a T4 (sm75) is refused");
        assert_eq!(e, ConfigError::Bf16Unsupported { device: "cuda:1".into(), major: 7, minor: 5 });
        assert!(e.to_string().contains("--precision f32"));
        assert!(bf16_problem(Precision::Bf16, &gpus[..1], caps).is_none(), "an H100 (sm90) runs bf16");
        assert!(bf16_problem(Precision::F32, &gpus, caps).is_none());
        assert!(bf16_problem(Precision::Bf16, &[DeviceId::Cpu], caps).is_none(), "the CPU has no such limit");
    }
}
