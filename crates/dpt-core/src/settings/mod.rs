//! A run's settings as one typed tree: plain data, nested by concern, the only home of every
//! setting. The flags, a `--config` file and a checkpoint are layers over the model's defaults
//! (`resolve.rs`); `config.toml`, the checkpoint and the ranks' agreement carry the tree as it
//! is; `validate.rs` refuses what cannot train. Live resources (a process group, a TorchScript
//! module, resume tensors) are not settings and travel apart, in the engine's run kit.

pub mod agreement;
pub mod cuda_graphs;
mod model_choice;
mod resolve;
mod validate;

use std::num::NonZeroUsize;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::augment::{Augment, Preset};
use crate::best::BestMetric;
use crate::checkpoint_every::CheckpointEvery;
use crate::data::{DataSettings, Loader};
use crate::model::{LossKind, ModelKind, Normalization, Precision};
use crate::optim::loss_scale::LossScaling;
use crate::optim::schedule::Schedule;
use crate::optim::{OptimConfig, OptimizerKind};
use crate::policies::OnNan;

pub use cuda_graphs::CudaGraphs;
pub use model_choice::{DistBackend, ModelChoice};
pub use resolve::{differences, flat, layer, ConfigFile, Layers};
pub use validate::SettingsError;

/// Everything a run is asked to do, as plain data.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub model: ModelSettings,
    pub data: DataSettings,
    pub optimizer: OptimConfig,
    pub schedule: Schedule,
    pub recipe: Recipe,
    pub best: Best,
    pub precision: PrecisionSettings,
    pub checkpoints: Checkpoints,
    /// Where and how this attempt of the run executes: it may differ between the attempts of
    /// one run (a requeue on other nodes), and a checkpoint does not carry it to a resume.
    pub placement: Placement,
}

crate::named_in_records!(Settings);

/// The network and what it is fed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSettings {
    /// A built-in model, or the path of a TorchScript file.
    pub name: ModelChoice,
    /// A TorchScript model's training loss (absent: the model's own; cross-entropy for files).
    pub loss: Option<LossKind>,
    /// The input normalization asked for (absent: the built-in model's, or measured on the
    /// training set, a value of the run's and not a setting).
    pub normalize: Option<Normalization>,
    /// Weights a new run starts from, loaded by name and shape.
    pub init_from: Option<PathBuf>,
}

/// The training recipe besides the optimizer and the schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Recipe {
    pub epochs: usize,
    /// The run's length in optimizer steps: token data has no epochs.
    pub steps: Option<usize>,
    /// Token data: evaluate the validation windows every this many steps.
    pub eval_every: Option<usize>,
    /// Token data: batches of validation windows each evaluation reads (the same each time).
    pub eval_batches: usize,
    /// Byte-tokenized text: tokens of a continuation sampled after each evaluation (0: none).
    pub sample_tokens: usize,
    /// The global batch of one optimizer step, split over the replicas.
    pub batch_size: usize,
    /// Seed of the initialization, the shuffles, the augmentation and the dropout streams.
    pub seed: u64,
    /// Linear scaling rule: the schedule's base is `optimizer.lr × batch_size / this`.
    pub lr_batch_ref: Option<usize>,
    /// `F.cross_entropy(label_smoothing=)` of the training loss.
    pub label_smoothing: f64,
    /// Clip the mean gradient's global L2 norm to this (`clip_grad_norm_`).
    pub clip_grad_norm: Option<f64>,
    /// Micro-batches each replica splits its share of a step into.
    pub accumulate: usize,
    /// Decay of the weights' exponential moving average.
    pub ema: Option<f64>,
    /// An augmentation preset, refined by the two settings after it.
    pub augment: Option<Preset>,
    /// Random crop with this zero padding (0: none).
    pub crop_padding: Option<u32>,
    /// Random horizontal flip.
    pub hflip: Option<bool>,
}

impl Default for Recipe {
    fn default() -> Self {
        let d = ModelKind::Lenet.defaults();
        Recipe {
            epochs: d.epochs,
            steps: None,
            eval_every: None,
            eval_batches: DEFAULT_EVAL_BATCHES,
            sample_tokens: DEFAULT_SAMPLE_TOKENS,
            batch_size: d.batch_size,
            seed: 0,
            lr_batch_ref: None,
            label_smoothing: 0.0,
            clip_grad_norm: None,
            accumulate: 1,
            ema: None,
            augment: None,
            crop_padding: None,
            hflip: None,
        }
    }
}

/// Batches of validation windows a token-data evaluation reads unless `--eval-batches` says.
pub const DEFAULT_EVAL_BATCHES: usize = 20;

/// Tokens sampled after each evaluation of byte-tokenized text unless `--sample-tokens` says.
pub const DEFAULT_SAMPLE_TOKENS: usize = 100;

/// Evaluations a token-data run makes over its steps unless `--eval-every` says.
pub const DEFAULT_EVALUATIONS: usize = 10;

impl Recipe {
    /// Token data: the steps between two evaluations (`--eval-every`, else a tenth of the run),
    /// and the evaluations of the run (the last may come after fewer steps).
    pub fn eval_periods(&self, steps: usize) -> (usize, usize) {
        let every = self.eval_every.unwrap_or(steps.div_ceil(DEFAULT_EVALUATIONS)).clamp(1, steps.max(1));
        (every, steps.div_ceil(every))
    }

    /// The augmentation the recipe asks for: the preset, refined.
    pub fn augmentation(&self) -> Augment {
        let mut a = self.augment.unwrap_or(Preset::None).augment();
        if let Some(p) = self.crop_padding {
            a.crop_padding = (p > 0).then_some(p);
        }
        if let Some(f) = self.hflip {
            a.hflip = f;
        }
        a
    }
}

/// The best evaluations kept, by which metric, and the early stop.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Best {
    /// Keep this many best evaluations as checkpoints under `best/` (0: none).
    pub keep: usize,
    pub metric: BestMetric,
    /// Stop after this many evaluations without improvement.
    pub early_stop: Option<usize>,
}

/// The number format and its loss scaling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrecisionSettings {
    pub format: Precision,
    /// Float32 matrix products and convolutions on GPUs in TF32 (cuBLAS and cuDNN, as
    /// `torch.backends.cuda.matmul.allow_tf32`); off keeps them in IEEE float32.
    pub tf32: bool,
    /// Dynamic loss scaling (absent: on with f16 only).
    pub loss_scale: Option<bool>,
    pub loss_scale_init: Option<f32>,
    pub loss_scale_interval: Option<u32>,
}

impl Default for PrecisionSettings {
    fn default() -> Self {
        PrecisionSettings {
            format: Precision::F32,
            tf32: true,
            loss_scale: None,
            loss_scale_init: None,
            loss_scale_interval: None,
        }
    }
}

impl PrecisionSettings {
    /// Scales the loss by `scaling`'s rules.
    pub fn scale_loss(&mut self, scaling: LossScaling) {
        self.loss_scale = Some(true);
        (self.loss_scale_init, self.loss_scale_interval) =
            (Some(scaling.init), Some(scaling.growth_interval));
    }

    /// The loss scaling in force: GradScaler's defaults under what was set.
    pub fn loss_scaling(&self) -> Option<LossScaling> {
        let on = self.loss_scale.unwrap_or(self.format == Precision::F16);
        on.then(|| {
            let base = LossScaling::default();
            LossScaling {
                init: self.loss_scale_init.unwrap_or(base.init),
                growth_interval: self.loss_scale_interval.unwrap_or(base.growth_interval),
            }
        })
    }
}

/// When checkpoints are written and kept, and what the run does when the loss stops being
/// finite or the final save fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Checkpoints {
    pub every: CheckpointEvery,
    /// The newest checkpoints kept under `checkpoints/` (1: `checkpoint.safetensors` only).
    pub keep: usize,
    /// Absent: pause in the dashboard, stop headless.
    pub on_nan: Option<OnNan>,
    /// Headless: tries of a failed final save before exiting 1.
    pub save_retries: u32,
    /// Headless: seconds between two tries.
    pub save_retry_secs: f64,
    /// How often a rewind point (a host copy of what a checkpoint holds) is taken.
    pub snapshot_every: CheckpointEvery,
    /// Rewind points kept in host memory, the newest (0: none).
    pub snapshots: usize,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints {
            every: CheckpointEvery::default(),
            keep: 1,
            on_nan: None,
            save_retries: 6,
            save_retry_secs: 10.0,
            snapshot_every: CheckpointEvery::Steps(200),
            snapshots: 3,
        }
    }
}

/// Devices, threads, the loader, timeouts and the reporting cadence of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Placement {
    /// `auto`, `cpu`, `cpu:N` or a list such as `cuda:0,cuda:1`.
    pub devices: String,
    /// Intra-op threads per CPU replica (absent: the cores shared among them).
    pub cpu_threads: Option<usize>,
    pub loader: Loader,
    /// The host memory the data may take, in bytes.
    pub data_memory: u64,
    /// Streaming: batches decoded ahead of each replica, at most.
    pub prefetch: usize,
    /// Streaming: decode threads (absent: the process's cores).
    pub decode_threads: Option<usize>,
    /// Samples per evaluation batch on each replica (absent: a training micro-batch,
    /// [`Settings::eval_batch`]).
    pub eval_batch_size: Option<NonZeroUsize>,
    /// Gradient buckets' cap in MiB (0: reduce after the backward pass).
    pub bucket_cap_mb: f64,
    /// Channels-last convolutions (absent: the model's measured preference).
    pub channels_last: Option<bool>,
    /// Seconds after which a replica's step is reported stuck.
    pub step_timeout: f64,
    pub dist_backend: DistBackend,
    /// Seconds a rank waits for the others.
    pub dist_timeout: f64,
    /// Report training statistics every this many steps.
    pub log_every: usize,
    /// Stop this attempt after this many steps in all.
    pub max_steps: Option<usize>,
    /// Compare every replica's parameters after each step (slow).
    pub check_replicas: bool,
    /// Capture each GPU replica's step as a CUDA graph and replay it.
    pub cuda_graphs: CudaGraphs,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            devices: "auto".into(),
            cpu_threads: None,
            loader: Loader::Auto,
            data_memory: crate::data::DATA_MEMORY,
            prefetch: 2,
            decode_threads: None,
            eval_batch_size: None,
            bucket_cap_mb: 25.0,
            channels_last: None,
            step_timeout: 600.0,
            dist_backend: DistBackend::Auto,
            dist_timeout: 300.0,
            log_every: 50,
            max_steps: None,
            check_replicas: false,
            cuda_graphs: CudaGraphs::Auto,
        }
    }
}

impl Settings {
    /// The reference program's settings for `model`, with `optimizer` (Adam and AdamW without
    /// SGD's momentum).
    pub fn defaults(model: ModelKind, optimizer: OptimizerKind) -> Settings {
        let d = model.defaults();
        let mut optim = OptimConfig::sgd(d.lr, d.momentum, 0.0);
        if optimizer != OptimizerKind::Sgd {
            optim.kind = optimizer;
            optim.momentum = 0.0;
        }
        Settings {
            model: ModelSettings { name: ModelChoice::Builtin(model), ..Default::default() },
            optimizer: optim,
            recipe: Recipe { epochs: d.epochs, batch_size: d.batch_size, ..Default::default() },
            ..Default::default()
        }
    }

    /// The model kind the settings name.
    pub fn model_kind(&self) -> ModelKind {
        self.model.name.kind()
    }

    /// The training loss: the one asked for, else the model's own.
    pub fn loss(&self) -> LossKind {
        self.model.loss.unwrap_or_else(|| self.model_kind().loss())
    }

    /// Samples per evaluation forward on each of `replicas` replicas (all processes'):
    /// `--eval-batch-size`, else a training micro-batch (a replica's share of the batch, over
    /// `--accumulate`), so an evaluation never holds more at once than a training step does.
    pub fn eval_batch(&self, replicas: usize) -> usize {
        self.placement.eval_batch_size.map_or_else(|| self.micro_batch(replicas), NonZeroUsize::get)
    }

    /// The most samples a forward pass of training takes on each of `replicas` replicas: a
    /// replica's share of the batch over `--accumulate`.
    pub fn micro_batch(&self, replicas: usize) -> usize {
        self.replica_batch(replicas).div_ceil(self.recipe.accumulate.max(1)).max(1)
    }

    /// The most samples of a step's batch each of `replicas` replicas gets (all its
    /// micro-batches'): the batch split over the replicas, rounded up.
    pub fn replica_batch(&self, replicas: usize) -> usize {
        self.recipe.batch_size.div_ceil(replicas.max(1))
    }

    /// The schedule's base rate: the optimizer's lr, scaled with the global batch when asked.
    pub fn base_lr(&self) -> f64 {
        match self.recipe.lr_batch_ref {
            Some(r) if r > 0 => self.optimizer.lr * self.recipe.batch_size as f64 / r as f64,
            _ => self.optimizer.lr,
        }
    }

    /// The same settings with every value that follows from others written out (the loss, the
    /// augmentation's crop and flip, the loss scaling): two trees that train alike compare equal
    /// whether a value was given or left to its default.
    pub fn effective(&self) -> Settings {
        let mut s = self.clone();
        s.model.loss = Some(self.loss());
        let a = self.recipe.augmentation();
        let r = &mut s.recipe;
        r.augment = a.resized_crop.map(|_| crate::augment::Preset::Imagenet);
        (r.crop_padding, r.hflip) = (Some(a.crop_padding.unwrap_or(0)), Some(a.hflip));
        let scaling = self.precision.loss_scaling();
        let p = &mut s.precision;
        p.loss_scale = Some(scaling.is_some());
        (p.loss_scale_init, p.loss_scale_interval) =
            (scaling.map(|l| l.init), scaling.map(|l| l.growth_interval));
        s
    }

    /// The tree as a TOML document (absent values left out: TOML has no null).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("settings are TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_batch_micro_batch_and_evaluation_batch_are_derived_in_one_chain() {
        let mut s = Settings::default();
        (s.recipe.batch_size, s.recipe.accumulate) = (100, 3);
        assert_eq!((s.replica_batch(3), s.micro_batch(3), s.eval_batch(3)), (34, 12, 12));
        assert_eq!((s.replica_batch(0), s.micro_batch(1000)), (100, 1), "no replicas is one");
        s.placement.eval_batch_size = NonZeroUsize::new(64);
        assert_eq!(s.eval_batch(3), 64, "--eval-batch-size wins");
    }

    #[test]
    fn the_tree_round_trips_through_toml() {
        let mut s = Settings::defaults(ModelKind::Resnet18, OptimizerKind::AdamW);
        s.recipe.clip_grad_norm = Some(1.5);
        s.recipe.augment = Some(Preset::Cifar);
        s.model.normalize = Some(Normalization { mean: vec![0.5], std: vec![0.25] });
        s.checkpoints.every = CheckpointEvery::Steps(500);
        s.schedule.shape = "step:3,6".parse().expect("test set-up");
        let text = s.to_toml();
        let back: Settings = toml::from_str(&text).expect("reads back");
        assert_eq!(back, s, "{text}");
    }

    #[test]
    fn defaults_follow_the_model_and_the_optimizer() {
        let sgd = Settings::defaults(ModelKind::Lenet, OptimizerKind::Sgd);
        assert_eq!((sgd.optimizer.lr, sgd.recipe.batch_size), (0.2, 256));
        let adam = Settings::defaults(ModelKind::Resnet18, OptimizerKind::Adam);
        assert_eq!((adam.optimizer.kind, adam.optimizer.momentum), (OptimizerKind::Adam, 0.0));
        assert_eq!(adam.loss(), ModelKind::Resnet18.loss());
    }

    #[test]
    fn loss_scaling_is_on_with_f16_unless_turned_off() {
        let mut p = PrecisionSettings { format: Precision::F16, ..Default::default() };
        assert_eq!(p.loss_scaling(), Some(LossScaling::default()));
        p.loss_scale = Some(false);
        assert_eq!(p.loss_scaling(), None);
        let f32_on =
            PrecisionSettings { loss_scale: Some(true), loss_scale_init: Some(8.0), ..Default::default() };
        assert_eq!(f32_on.loss_scaling().map(|l| l.init), Some(8.0));
    }
}
