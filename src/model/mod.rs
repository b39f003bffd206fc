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

use tch::{Device, Kind, Tensor};

pub use lenet::Lenet;
pub use mnist_net::MnistNet;
pub use resnet::Resnet18;

pub use dpt_core::model::{Defaults, LossKind, ModelKind, Normalization, Precision, Task};

/// The tensors of `model` (a built-in, or the TorchScript `script`), by name and shape.
pub fn specs(model: ModelKind, script: Option<&script::ScriptModel>) -> Builder {
    let mut b = Builder::default();
    match script {
        Some(s) => {
            b.params = s.params.clone();
            b.buffers = s.buffers.clone();
        }
        None => {
            let _ = build(model, &mut b);
        }
    }
    b
}

/// Declares a built-in model's tensors into `builder` and returns its forward pass; `None`
/// for a TorchScript model, whose tensors come from its file (`script::ScriptModel`).
pub fn build(model: ModelKind, builder: &mut Builder) -> Option<Box<dyn Network>> {
    match model {
        ModelKind::Lenet => Some(Box::new(Lenet::new(builder))),
        ModelKind::Resnet18 => Some(Box::new(Resnet18::new(builder))),
        ModelKind::MnistNet => Some(Box::new(MnistNet::new(builder))),
        ModelKind::Script => None,
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

/// The format convolutions and matrix products compute in.
pub fn compute_kind(precision: Precision) -> Kind {
    match precision {
        Precision::F32 => Kind::Float,
        Precision::Bf16 => Kind::BFloat16,
        Precision::F16 => Kind::Half,
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
            low => t.to_kind(compute_kind(low)),
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
    Script(#[from] dpt_sys::c10d::C10dError),
    /// A built-in model was asked for its own loss.
    #[error("the model computes no loss of its own")]
    NoOwnLoss,
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

    /// The loss a model that takes the targets computes itself (`forward(x, y)`, its last
    /// output), the mean over its batch; only such a model (a TorchScript file) has one.
    fn forward_loss(&self, _x: &Tensor, _y: &Tensor, _ctx: &Forward) -> Result<Tensor, ForwardError> {
        Err(ForwardError::NoOwnLoss)
    }

    /// The logits of a model that takes the targets (its first output, the targets `y` given
    /// only for the model's sake); a one-input model's forward pass otherwise.
    fn forward_logits(
        &self,
        params: &[Tensor],
        buffers: &[Tensor],
        x: &Tensor,
        _y: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, ForwardError> {
        self.forward(params, buffers, x, ctx)
    }

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
