//! A user's own network, as a TorchScript file (`torch.jit.script(model).save(path)` or
//! `torch.jit.trace`), trained by the same engine as the built-in models.
//!
//! The module owns its tensors; the engine wants them in its flat buffers. Each replica loads
//! the file on its device and points the module's parameters and floating-point buffers at
//! views of the flat buffers (`set_data`), so the allreduce, the SGD step and the BatchNorm
//! broadcast act on the module in place, and the forward pass differentiates against the
//! module's own parameter tensors. In bf16 or f16 the forward runs in an autocast scope, so the
//! module computes as it would under `torch.autocast` while its weights stay float32. Integer buffers (BatchNorm's `num_batches_tracked`) stay with
//! each replica: every replica runs the same number of training passes.
//!
//! This file is the one seam for a model format: another (`torch.export` programs, once a C++
//! loader for training them exists) would add a loader beside this one.

use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};
use thiserror::Error;

use super::{Forward, Init, Network, Precision, Task, TensorSpec};
use dpt_sys::c10d::amp::Autocast;
use dpt_sys::c10d::jit::ScriptModule;
use dpt_sys::c10d::C10dError;

/// A model file that cannot be trained, found before anything is written.
#[derive(Debug, Error, PartialEq)]
pub enum ScriptError {
    #[error("{path} is not a TorchScript file ({why}); save the model with torch.jit.script(model).save(path) or torch.jit.trace(model, example).save(path)")]
    NotTorchScript { path: PathBuf, why: String },
    #[error("{path} has no trainable parameters; export the module itself (with its nn.Parameter tensors), not a function")]
    NoParameters { path: PathBuf },
    #[error("{path}: parameter '{name}' is {kind:?}; dpt-tui trains float32 weights: call model.float() before saving")]
    NotFloat { path: PathBuf, name: String, kind: Kind },
    #[error("{path}: forward failed on one sample of shape {shape:?}: {why}")]
    Forward { path: PathBuf, shape: Vec<i64>, why: String },
    #[error("{path}: forward failed on two token windows of --block-size {block}: {why}; a block longer than the model's context (its position embedding) fails so, as does a token id beyond its vocabulary")]
    TokenForward { path: PathBuf, block: i64, why: String },
    #[error("{path}: forward returned shape {got:?} for a batch of {n}; it must return [N, classes] (logits, or log-probabilities with --loss nll)")]
    OutputShape { path: PathBuf, got: Vec<i64>, n: i64 },
    #[error("{path} predicts {classes} classes but the data's labels go up to {max_label}; the last layer needs at least {} outputs", max_label + 1)]
    TooFewClasses { path: PathBuf, classes: i64, max_label: i64 },
    #[error("{path}: forward returned logits over {vocab} tokens but the data holds token {max_token}; the model's vocabulary must cover the data's (or the data was made with another tokenizer)")]
    TooSmallVocab { path: PathBuf, vocab: i64, max_token: i64 },
    #[error("{path}: forward takes {inputs} inputs; it takes one (the inputs: dpt-tui computes the loss) or two (inputs and targets: the model returns its loss)")]
    Inputs { path: PathBuf, inputs: usize },
    #[error("{path}: forward(inputs, targets) returned {got}; a model given targets returns its loss, a scalar tensor, or a tuple or list whose last element is the scalar loss")]
    NotALoss { path: PathBuf, got: String },
    #[error("{path}: forward returned shape {got:?} for inputs {inputs:?}; a one-input model returns [N, classes] logits for class labels, or [N, T, vocab] logits for [N, T] token targets")]
    TokenShape { path: PathBuf, got: Vec<i64>, inputs: Vec<i64> },
}

/// What the engine needs to know of a TorchScript model, read once from the file: the tensors
/// it trains (names and shapes) and the classes it predicts. Plain data, shared by every
/// replica and the coordinator. The initial values stay in the file until the run starts
/// ([`ScriptModel::initial_values`]): a copy of the weights held for the whole run would cost
/// as much memory as the weights themselves.
#[derive(Clone, PartialEq)]
pub struct ScriptModel {
    pub path: PathBuf,
    pub params: Vec<TensorSpec>,
    pub buffers: Vec<TensorSpec>,
    pub classes: i64,
    /// Whether the code draws random numbers (dropout): each replica then draws from a stream
    /// seeded per step and replica, as the built-in models do.
    pub random: bool,
    /// The inputs `forward` takes: 1 (the inputs), or 2 (inputs and targets; the model
    /// returns its loss).
    pub inputs: usize,
    /// What the model is trained to do, found by [`ScriptModel::check`].
    pub task: Task,
    /// The token ids a language model's output covers (the last dimension of its `[n, T, V]`
    /// logits), found by [`ScriptModel::check`]; `None` for a model that shows none.
    pub vocab: Option<i64>,
    /// The first two distinct parameters whose values lie in the same memory (one a view of
    /// the other's storage), by name: `--zero 2` refuses to cut them apart.
    pub shared: Option<(String, String)>,
}

/// The first two of `named` whose values overlap in memory (distinct tensors on one storage;
/// the same tensor under two names is listed once already).
fn sharing(named: &[(String, Tensor)]) -> Option<(String, String)> {
    let extent = |t: &Tensor| {
        let start = t.data_ptr() as usize;
        let last: i64 = t.size().iter().zip(t.stride()).map(|(n, s)| (n - 1).max(0) * s).sum();
        let bytes = if t.numel() == 0 { 0 } else { (last as usize + 1) * t.kind().elt_size_in_bytes() };
        (start, start + bytes)
    };
    let spans: Vec<(usize, usize)> = named.iter().map(|(_, t)| extent(t)).collect();
    for (i, a) in spans.iter().enumerate() {
        for (j, b) in spans.iter().enumerate().skip(i + 1) {
            if a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1 {
                return Some((named[i].0.clone(), named[j].0.clone()));
            }
        }
    }
    None
}

impl std::fmt::Debug for ScriptModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptModel")
            .field("path", &self.path)
            .field("params", &self.params.len())
            .field("buffers", &self.buffers.len())
            .field("classes", &self.classes)
            .field("random", &self.random)
            .field("inputs", &self.inputs)
            .field("task", &self.task)
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

/// What a model is checked against before the run starts: two samples' inputs (normalized
/// images `[n, C, H, W]`, or token windows `[n, T]`), their targets (labels `[n]`, or tokens
/// `[n, T]`), and the largest target of the data (label or token id).
pub struct SampleInputs {
    pub x: Tensor,
    pub y: Tensor,
    pub max_target: i64,
}

fn specs(named: &[(String, Tensor)]) -> Vec<TensorSpec> {
    named
        .iter()
        .map(|(name, t)| TensorSpec {
            name: name.clone(),
            shape: t.size(),
            init: Init::Zeros,
            frozen: !t.requires_grad(),
        })
        .collect()
}

/// `named`'s values concatenated in order as one flat float32 CPU tensor, refused unless
/// they are the tensors `specs` describe (the file changed since it was read).
fn flat_values(named: Vec<(String, Tensor)>, specs: &[TensorSpec], path: &Path) -> Result<Tensor, C10dError> {
    let same = named.len() == specs.len()
        && named.iter().zip(specs).all(|((n, t), s)| *n == s.name && t.size() == s.shape);
    if !same {
        return Err(C10dError(format!("{} changed since it was read; start the run again", path.display())));
    }
    let _guard = tch::no_grad_guard();
    let parts: Vec<Tensor> =
        named.iter().map(|(_, t)| t.detach().to_kind(Kind::Float).reshape([-1])).collect();
    Ok(if parts.is_empty() { Tensor::zeros([0], (Kind::Float, Device::Cpu)) } else { Tensor::cat(&parts, 0) })
}

/// The float32 buffers of a module (BatchNorm statistics), kept identical across replicas.
fn float_buffers(module: &ScriptModule) -> Result<Vec<(String, Tensor)>, C10dError> {
    Ok(module.named_buffers()?.into_iter().filter(|(_, t)| t.kind() == Kind::Float).collect())
}

impl ScriptModel {
    /// Reads `path`: its parameters and buffers, whether it draws random numbers. The forward
    /// pass is checked against the data by [`ScriptModel::check`].
    pub fn read(path: &Path) -> Result<ScriptModel, ScriptError> {
        let not_script = |why: String| ScriptError::NotTorchScript { path: path.to_owned(), why };
        if !path.is_file() {
            return Err(not_script("no such file".into()));
        }
        let module = ScriptModule::load(path, Device::Cpu).map_err(|e| not_script(e.0))?;
        let params = module.named_parameters().map_err(|e| not_script(e.0))?;
        if params.iter().all(|(_, t)| !t.requires_grad()) {
            return Err(ScriptError::NoParameters { path: path.to_owned() });
        }
        if let Some((name, t)) = params.iter().find(|(_, t)| t.kind() != Kind::Float) {
            return Err(ScriptError::NotFloat { path: path.to_owned(), name: name.clone(), kind: t.kind() });
        }
        let buffers = float_buffers(&module).map_err(|e| not_script(e.0))?;
        let random = module.uses_randomness().map_err(|e| not_script(e.0))?;
        let inputs = module.forward_inputs().map_err(|e| not_script(e.0))?;
        if !(1..=2).contains(&inputs) {
            return Err(ScriptError::Inputs { path: path.to_owned(), inputs });
        }
        Ok(ScriptModel {
            path: path.to_owned(),
            params: specs(&params),
            buffers: specs(&buffers),
            shared: sharing(&params),
            classes: 0,
            vocab: None,
            random,
            inputs,
            task: Task::Classify,
        })
    }

    /// Runs the forward pass once, in evaluation mode, on `sample` (two samples of the data:
    /// normalized images or token windows, and their targets) and checks what it returns
    /// against the targets; records the task and the number of classes (or tokens).
    pub fn check(&mut self, sample: &SampleInputs) -> Result<(), ScriptError> {
        let path = self.path.clone();
        let x = &sample.x;
        let tokens = x.dim() == 2 && sample.y.dim() == 2;
        let forward_error = |why: String| match tokens {
            true => ScriptError::TokenForward { path: path.clone(), block: x.size()[1], why },
            false => ScriptError::Forward { path: path.clone(), shape: x.size(), why },
        };
        let module = ScriptModule::load(&self.path, Device::Cpu).map_err(|e| forward_error(e.0))?;
        module.set_train(false).map_err(|e| forward_error(e.0))?;
        let inputs: Vec<&Tensor> = if self.inputs == 2 { vec![x, &sample.y] } else { vec![x] };
        let outs = {
            let _guard = tch::no_grad_guard();
            module.forward(&inputs).map_err(|e| forward_error(e.0))?
        };
        if self.inputs == 2 {
            let got = match outs.last() {
                Some(loss) if loss.numel() == 1 && loss.is_floating_point() => {
                    (self.task, self.classes) = (Task::ModelLoss, 0);
                    // Logits `[n, T, V]` among the outputs (nanoGPT's `(logits, loss)`) give
                    // the vocabulary the token files are checked against.
                    let shape = x.size();
                    self.vocab = outs.iter().find_map(|t| match t.size().as_slice() {
                        [n, t, v] if tokens && [*n, *t] == shape[..] => Some(*v),
                        _ => None,
                    });
                    return Ok(());
                }
                Some(t) => format!("a last output of shape {:?} ({:?})", t.size(), t.kind()),
                None => "nothing".to_owned(),
            };
            return Err(ScriptError::NotALoss { path, got });
        }
        let out = outs.first().ok_or_else(|| forward_error("it returned an empty tuple".into()))?;
        let n = x.size().first().copied().unwrap_or(1);
        let max = sample.max_target;
        match (out.size().as_slice(), sample.y.size().as_slice()) {
            ([rows, classes], [_]) if *rows == n => {
                if *classes <= max {
                    return Err(ScriptError::TooFewClasses { path, classes: *classes, max_label: max });
                }
                (self.task, self.classes) = (Task::Classify, *classes);
            }
            ([rows, t, vocab], [_, ty]) if *rows == n && t == ty => {
                if *vocab <= max {
                    return Err(ScriptError::TooSmallVocab { path, vocab: *vocab, max_token: max });
                }
                (self.task, self.classes, self.vocab) = (Task::Tokens, *vocab, Some(*vocab));
            }
            (got, [_]) => return Err(ScriptError::OutputShape { path, got: got.to_vec(), n }),
            (got, _) => return Err(ScriptError::TokenShape { path, got: got.to_vec(), inputs: x.size() }),
        }
        Ok(())
    }

    /// The file's name, for records and screens.
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// The file's parameters and float buffers, each concatenated in order as one flat CPU
    /// tensor: the values every replica starts from. Read from the file when the run starts,
    /// and dropped once the replicas hold them.
    pub fn initial_values(&self) -> Result<(Tensor, Tensor), C10dError> {
        let module = ScriptModule::load(&self.path, Device::Cpu)?;
        let params = flat_values(module.named_parameters()?, &self.params, &self.path)?;
        let buffers = flat_values(float_buffers(&module)?, &self.buffers, &self.path)?;
        Ok((params, buffers))
    }

    /// Writes the module with the tensors `named` (the trained values, by name, in logical
    /// order) to `dest`, loadable with `torch.jit.load`. The caller makes the write atomic.
    pub fn export(&self, named: &[(String, Tensor)], dest: &Path) -> Result<(), C10dError> {
        let module = ScriptModule::load(&self.path, Device::Cpu)?;
        let mut own = module.named_parameters()?;
        own.extend(float_buffers(&module)?);
        let _guard = tch::no_grad_guard();
        for (name, t) in own.iter_mut() {
            if let Some((_, value)) = named.iter().find(|(n, _)| n == name) {
                t.copy_(&value.to_device(Device::Cpu).to_kind(t.kind()).view(t.size().as_slice()));
            }
        }
        module.save(dest)
    }
}

/// One replica's TorchScript module, its tensors bound to the engine's flat buffers.
pub struct ScriptNet {
    module: ScriptModule,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
    random: bool,
    /// `forward` takes the targets too.
    takes_targets: bool,
    training: std::cell::Cell<Option<bool>>,
    /// Where the module runs: the device type its forward's autocast scope is for.
    device: Device,
}

impl ScriptNet {
    fn mode(&self, train: bool) -> Result<(), C10dError> {
        if self.training.get() != Some(train) {
            self.module.set_train(train)?;
            self.training.set(Some(train));
        }
        Ok(())
    }

    /// The module's forward on `inputs` in `ctx`'s mode; in bf16 or f16 inside an autocast
    /// scope for its device, as `with torch.autocast(...)` around a module call (the backward
    /// then runs outside it, on the graph the forward recorded).
    fn run(&self, inputs: &[&Tensor], ctx: &Forward) -> Result<Vec<Tensor>, C10dError> {
        self.mode(ctx.train)?;
        let _autocast = match ctx.precision {
            Precision::F32 => None,
            low => Some(Autocast::enter(self.device, super::compute_kind(low))?),
        };
        self.module.forward(inputs)
    }
}

impl ScriptNet {
    /// Loads `model`'s file on `device`.
    pub fn load(model: &ScriptModel, device: Device) -> Result<ScriptNet, C10dError> {
        let module = ScriptModule::load(&model.path, device)?;
        let params: Vec<Tensor> = module.named_parameters()?.into_iter().map(|(_, t)| t).collect();
        let buffers: Vec<Tensor> = float_buffers(&module)?.into_iter().map(|(_, t)| t).collect();
        if params.len() != model.params.len() || buffers.len() != model.buffers.len() {
            return Err(C10dError(format!("{} changed while loading", model.path.display())));
        }
        Ok(ScriptNet {
            module,
            params,
            buffers,
            random: model.random,
            takes_targets: model.inputs == 2,
            training: std::cell::Cell::new(None),
            device,
        })
    }
}

impl Network for ScriptNet {
    fn forward(
        &self,
        _params: &[Tensor],
        _buffers: &[Tensor],
        x: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, super::ForwardError> {
        let out = self.run(&[x], ctx)?.into_iter().next();
        Ok(out.ok_or_else(|| C10dError("forward returned an empty tuple".into()))?.to_kind(Kind::Float))
    }

    fn forward_logits(
        &self,
        params: &[Tensor],
        buffers: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, super::ForwardError> {
        if !self.takes_targets {
            return self.forward(params, buffers, x, ctx);
        }
        let logits = self.run(&[x, y], ctx)?.into_iter().next();
        Ok(logits.ok_or_else(|| C10dError("forward returned an empty tuple".into()))?.to_kind(Kind::Float))
    }

    fn forward_loss(&self, x: &Tensor, y: &Tensor, ctx: &Forward) -> Result<Tensor, super::ForwardError> {
        let loss = self.run(&[x, y], ctx)?.pop();
        Ok(loss
            .ok_or_else(|| C10dError("forward returned an empty tuple".into()))?
            .to_kind(Kind::Float)
            .reshape([]))
    }

    fn adopt(&mut self, params: &[Tensor], buffers: &[Tensor]) -> Option<Vec<Tensor>> {
        let _guard = tch::no_grad_guard();
        for (own, view) in self.params.iter_mut().zip(params) {
            own.set_data(&view.detach());
        }
        for (own, view) in self.buffers.iter_mut().zip(buffers) {
            own.set_data(&view.detach());
        }
        Some(self.params.iter().map(Tensor::shallow_clone).collect())
    }

    fn draws_inside(&self) -> bool {
        self.random
    }
}
