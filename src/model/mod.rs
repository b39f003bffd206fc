//! The seed models, written functionally over flat parameter storage.
//!
//! A model declares its tensors through a [`Builder`] (name, shape, initialization) and keeps
//! only their indices; its forward pass reads the tensors from slices. The engine owns the
//! storage (see `engine::flat`), which lets one contiguous buffer hold every parameter, so the
//! allreduce and the optimizer step each touch a single tensor.

mod lenet;
mod mnist_net;
mod resnet;
pub mod script;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

pub use lenet::Lenet;
pub use mnist_net::MnistNet;
pub use resnet::Resnet18;

/// The models dpt-tui trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// The training loss of a model (both summed over the shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// Cross-entropy on logits.
    CrossEntropy,
    /// Negative log-likelihood on log-probabilities.
    Nll,
}

impl std::str::FromStr for LossKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cross-entropy" => Ok(LossKind::CrossEntropy),
            "nll" => Ok(LossKind::Nll),
            _ => Err(format!("unknown loss '{s}'; use cross-entropy or nll")),
        }
    }
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

    /// Declares a built-in model's tensors into `builder` and returns its forward pass; `None`
    /// for a TorchScript model, whose tensors come from its file (`script::ScriptModel`).
    pub fn build(self, builder: &mut Builder) -> Option<Box<dyn Network>> {
        match self {
            ModelKind::Lenet => Some(Box::new(Lenet::new(builder))),
            ModelKind::Resnet18 => Some(Box::new(Resnet18::new(builder))),
            ModelKind::MnistNet => Some(Box::new(MnistNet::new(builder))),
            ModelKind::Script => None,
        }
    }
}

/// How a tensor starts out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// N(0, std²).
    Normal {
        std: f64,
    },
    /// U(-bound, bound), PyTorch's default for conv and linear layers with bound 1/sqrt(fan_in).
    Uniform {
        bound: f64,
    },
    Zeros,
    Ones,
}

/// A named tensor a model declares.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<i64>,
    pub init: Init,
    /// A parameter the model keeps as it is (`requires_grad=False` in a TorchScript file, the
    /// usual fine-tuning export): no gradient, no allreduce, no update.
    pub frozen: bool,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }

    /// A freshly initialized CPU tensor for this spec, drawn from libtorch's global generator.
    pub fn initial_value(&self) -> Tensor {
        let opts = (Kind::Float, Device::Cpu);
        match self.init {
            Init::Normal { std } => Tensor::randn(self.shape.as_slice(), opts) * std,
            Init::Uniform { bound } => Tensor::rand(self.shape.as_slice(), opts) * (2.0 * bound) - bound,
            Init::Zeros => Tensor::zeros(self.shape.as_slice(), opts),
            Init::Ones => Tensor::ones(self.shape.as_slice(), opts),
        }
    }
}

/// Collects the trainable parameters and the buffers (BatchNorm statistics) of a model.
#[derive(Debug, Default, Clone)]
pub struct Builder {
    pub params: Vec<TensorSpec>,
    pub buffers: Vec<TensorSpec>,
}

impl Builder {
    /// Declares a trainable parameter and returns its index.
    pub fn param(&mut self, name: impl Into<String>, shape: &[i64], init: Init) -> usize {
        self.params.push(TensorSpec { name: name.into(), shape: shape.to_vec(), init, frozen: false });
        self.params.len() - 1
    }

    /// Declares a non-trainable buffer and returns its index.
    pub fn buffer(&mut self, name: impl Into<String>, shape: &[i64], init: Init) -> usize {
        self.buffers.push(TensorSpec { name: name.into(), shape: shape.to_vec(), init, frozen: true });
        self.buffers.len() - 1
    }

    /// Total number of trainable scalars.
    pub fn param_count(&self) -> i64 {
        self.params.iter().map(TensorSpec::numel).sum()
    }
}

/// The number format of the forward and backward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

impl Precision {
    /// The flag's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// The format convolutions and matrix products compute in.
    pub fn compute_kind(self) -> Kind {
        match self {
            Precision::F32 => Kind::Float,
            Precision::Bf16 => Kind::BFloat16,
            Precision::F16 => Kind::Half,
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            "f16" => Ok(Precision::F16),
            _ => Err(format!("unknown precision '{s}'; use f32, bf16 or f16")),
        }
    }
}

/// Per-call context of a forward pass.
pub struct Forward<'a> {
    /// Training mode: batch statistics in BatchNorm, dropout on.
    pub train: bool,
    /// Pre-drawn dropout masks, consumed in the order [`Network::dropout_masks`] lists them.
    pub masks: &'a [Tensor],
    pub precision: Precision,
}

impl Forward<'_> {
    /// The compute format of a tensor entering a convolution or a matrix product.
    pub fn cast(&self, t: &Tensor) -> Tensor {
        match self.precision {
            Precision::F32 => t.shallow_clone(),
            low => t.to_kind(low.compute_kind()),
        }
    }

    /// A 2-D convolution in the compute format.
    pub fn conv2d(&self, x: &Tensor, w: &Tensor, b: &Tensor, stride: i64, padding: i64) -> Tensor {
        self.cast(x).conv2d(&self.cast(w), Some(&self.cast(b)), [stride; 2], [padding; 2], [1, 1], 1)
    }

    /// A linear layer in the compute format.
    pub fn linear(&self, x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        self.cast(x).linear(&self.cast(w), Some(&self.cast(b)))
    }

    /// The network's output back in f32 for the loss.
    pub fn output(&self, t: Tensor) -> Tensor {
        t.to_kind(Kind::Float)
    }

    /// Dropout mask `i`, in the activations' format.
    pub fn mask(&self, i: usize) -> Tensor {
        self.cast(&self.masks[i])
    }
}

/// A model's forward pass over tensors it does not own.
/// A forward pass that failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// libtorch refused an operation of a built-in model.
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// The user's TorchScript model raised (its message summed up by the shim).
    #[error("the model's forward failed: {0}")]
    Script(#[from] crate::dist::c10d::C10dError),
}

pub trait Network: Send {
    /// Runs the network on a batch `x` of shape `[n, C, H, W]`; returns `[n, classes]`.
    fn forward(
        &self,
        params: &[Tensor],
        buffers: &[Tensor],
        x: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, ForwardError>;

    /// A network that holds its own tensors (a TorchScript module) moves them onto the flat
    /// buffers' views here, and returns the tensors its forward pass differentiates against.
    fn adopt(&mut self, _params: &[Tensor], _buffers: &[Tensor]) -> Option<Vec<Tensor>> {
        None
    }

    /// Whether the forward pass draws random numbers itself (from libtorch's generator), so
    /// the caller must seed it per replica and step around the call.
    fn draws_inside(&self) -> bool {
        false
    }

    /// Shapes (for a batch of `n`) and drop probabilities of the dropout masks a training
    /// forward pass needs, so the caller can draw them from a seeded stream of its own.
    fn dropout_masks(&self, _n: i64) -> Vec<(Vec<i64>, f64)> {
        Vec::new()
    }
}

/// A copy of the 4-D `t` laid out channels-last (same shape and values; strides NHWC), as
/// `t.contiguous(memory_format=torch.channels_last)` does; autograd follows it.
pub fn channels_last(t: &Tensor) -> Tensor {
    t.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// PyTorch's default initialization bound for a layer with `fan_in` inputs.
pub(crate) fn default_bound(fan_in: i64) -> f64 {
    1.0 / (fan_in as f64).sqrt()
}
