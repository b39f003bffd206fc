//! The models' vocabulary: which model a run trains, its reference hyper-parameters, input
//! normalization, loss and number format. The models themselves are the engine's (`model`).

use serde::{Deserialize, Serialize};

/// The models dpt-tui trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// d2l's from-scratch LeNet variant (seed 001).
    Lenet,
    /// d2l's ResNet-18 for 1x28x28 inputs (seed 002).
    Resnet18,
    /// The PyTorch MNIST example network (seed 004).
    MnistNet,
    /// A user's TorchScript file (`--model PATH`; see `script`).
    #[serde(rename = "torchscript")]
    Script,
}

impl std::str::FromStr for ModelKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [ModelKind::Lenet, ModelKind::Resnet18, ModelKind::MnistNet]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown model '{s}'; use lenet, resnet18 or mnist-net"))
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The hyper-parameters a model is trained with unless flags say otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    pub lr: f64,
    pub momentum: f64,
    pub batch_size: usize,
    pub epochs: usize,
}

/// How stored values become the network's input: `(x / 255 - mean) / std` for bytes, `(x -
/// mean) / std` for floats; one value for every channel, or one per channel. Runs record it
/// (start records, checkpoints) as `{mean, std}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Normalization {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

impl Normalization {
    /// The same mean and std for every channel.
    pub fn uniform(mean: f64, std: f64) -> Normalization {
        Normalization { mean: vec![mean], std: vec![std] }
    }
}

/// What a run's model is trained to do: found from the model and the data before the run
/// starts, recorded in the start record, and what decides the loss and the measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// `[N, classes]` outputs against class labels: loss, accuracy, top-5, confusion counts.
    #[default]
    Classify,
    /// `[N, T, vocab]` outputs against `[N, T]` token targets: token-level cross-entropy, loss
    /// and perplexity.
    Tokens,
    /// `forward(inputs, targets)` returns the loss itself (its last output): the loss only.
    ModelLoss,
}

impl Task {
    /// Whether the run counts correct predictions (accuracy, top-5, confusion).
    pub fn has_classes(self) -> bool {
        self == Task::Classify
    }
}

/// The training loss of a model (both summed over the shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// Cross-entropy on logits.
    CrossEntropy,
    /// Negative log-likelihood on log-probabilities.
    Nll,
}

impl ModelKind {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Lenet => "lenet",
            ModelKind::Resnet18 => "resnet18",
            ModelKind::MnistNet => "mnist-net",
            ModelKind::Script => "torchscript",
        }
    }

    /// The reference programs' hyper-parameters (d2l's seed documents).
    pub fn defaults(self) -> Defaults {
        match self {
            ModelKind::Lenet => Defaults { lr: 0.2, momentum: 0.0, batch_size: 256, epochs: 10 },
            ModelKind::Resnet18 => Defaults { lr: 0.1, momentum: 0.0, batch_size: 256, epochs: 10 },
            ModelKind::MnistNet => Defaults { lr: 0.01, momentum: 0.5, batch_size: 64, epochs: 10 },
            // A user's network: torch.optim.SGD's usual starting point for small CNNs.
            ModelKind::Script => Defaults { lr: 0.05, momentum: 0.9, batch_size: 128, epochs: 10 },
        }
    }

    /// Input normalization: d2l's models take x/255, seed 004 normalizes with MNIST's statistics.
    pub fn normalization(self) -> Normalization {
        match self {
            ModelKind::Lenet | ModelKind::Resnet18 | ModelKind::Script => Normalization::uniform(0.0, 1.0),
            ModelKind::MnistNet => Normalization::uniform(0.1307, 0.3081),
        }
    }

    /// Whether convolution weights and activations should be channels-last by default: measured
    /// per model (BENCHMARKS.md). LeNet's 20→50 convolution runs about 1.4× faster so on one CPU
    /// thread; the MNIST net's 1→10→20 convolutions run slower; cuDNN prefers it for ResNet-18.
    pub fn prefers_channels_last(self, on_gpu: bool) -> bool {
        match self {
            ModelKind::Lenet => true,
            ModelKind::Resnet18 => on_gpu,
            ModelKind::MnistNet | ModelKind::Script => false,
        }
    }

    /// The loss the seed trains with.
    pub fn loss(self) -> LossKind {
        match self {
            ModelKind::MnistNet => LossKind::Nll,
            ModelKind::Lenet | ModelKind::Resnet18 | ModelKind::Script => LossKind::CrossEntropy,
        }
    }
}

/// The number format of the forward and backward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Everything in f32 (convolutions use TF32 on GPUs that have it, libtorch's default).
    F32,
    /// Autocast-style mixed precision: convolutions and matrix products in bfloat16, the loss,
    /// the master weights, the gradients and the update in f32.
    Bf16,
    /// The same with float16, for GPUs without bfloat16 (V100, T4): its narrow range needs
    /// loss scaling (`--loss-scale dynamic`, on by default with it).
    F16,
}

crate::names!(LossKind, "loss", { CrossEntropy => "cross-entropy", Nll => "nll" });

crate::names!(Precision, "precision", { F32 => "f32", Bf16 => "bf16", F16 => "f16" });
