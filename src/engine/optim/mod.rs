//! The optimizer seam: which update rule a run uses ([`OptimConfig`]), and each replica's state
//! for it ([`OptimizerState`]) on the flat buffers. Every rule's state is a list of named slots
//! the size of the parameters (`momentum` for SGD, `exp_avg` and `exp_avg_sq` for Adam), saved in
//! checkpoints by those names, plus scratch buffers that are not.

pub mod adam;
pub mod schedule;
pub mod sgd;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::flat::Layout;
use adam::{Adam, AdamTensors};
use sgd::Sgd;

/// The update rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// `torch.optim.SGD`: momentum, Nesterov, L2 weight decay on every parameter.
    #[default]
    Sgd,
    /// `torch.optim.Adam`: L2 weight decay added to the gradient.
    Adam,
    /// `torch.optim.AdamW`: decoupled weight decay.
    AdamW,
}

impl OptimizerKind {
    /// The names of the state slots, as checkpoints store them.
    pub fn slots(self) -> &'static [&'static str] {
        match self {
            OptimizerKind::Sgd => &["momentum"],
            OptimizerKind::Adam | OptimizerKind::AdamW => &["exp_avg", "exp_avg_sq"],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::AdamW => "adamw",
        }
    }
}

impl std::fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OptimizerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sgd" => Ok(OptimizerKind::Sgd),
            "adam" => Ok(OptimizerKind::Adam),
            "adamw" => Ok(OptimizerKind::AdamW),
            _ => Err(format!("unknown optimizer '{s}'; use sgd, adam or adamw")),
        }
    }
}

/// A run's optimizer and its hyper-parameters (the lr here is the base of the schedule).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    pub kind: OptimizerKind,
    pub lr: f64,
    /// SGD only.
    pub momentum: f64,
    /// SGD only.
    pub nesterov: bool,
    pub weight_decay: f64,
    /// Adam and AdamW only.
    pub betas: (f64, f64),
    /// Adam and AdamW only.
    pub eps: f64,
    /// Decay every parameter; otherwise Adam and AdamW decay only tensors of two or more
    /// dimensions (weights, not biases or normalization scales). SGD always decays every one,
    /// as `torch.optim.SGD` does.
    pub decay_all: bool,
}

impl OptimConfig {
    /// Plain SGD as the seed's programs use it.
    pub fn sgd(lr: f64, momentum: f64, weight_decay: f64) -> Self {
        OptimConfig {
            kind: OptimizerKind::Sgd,
            lr,
            momentum,
            nesterov: false,
            weight_decay,
            betas: (0.9, 0.999),
            eps: 1e-8,
            decay_all: false,
        }
    }

    /// The optimizer and its settings in words (`adamw, betas 0.9,0.999, eps 1e-8, weight
    /// decay 0.05 on tensors of 2+ dimensions`), without the lr.
    pub fn describe(&self) -> String {
        let wd = self.weight_decay;
        let decay = match self.kind {
            OptimizerKind::Sgd => format!("weight decay {wd}"),
            _ if wd == 0.0 => "weight decay 0".to_owned(),
            _ if self.decay_all => format!("weight decay {wd} on every tensor"),
            _ => format!("weight decay {wd} on tensors of 2+ dimensions"),
        };
        match self.kind {
            OptimizerKind::Sgd => format!(
                "sgd, momentum {}{}, {decay}",
                self.momentum,
                if self.nesterov { " (nesterov)" } else { "" }
            ),
            kind => format!("{kind}, betas {},{}, eps {}, {decay}", self.betas.0, self.betas.1, self.eps),
        }
    }

    /// Whether tensors of `dims` dimensions get weight decay.
    pub fn decays(&self, dims: usize) -> bool {
        self.kind == OptimizerKind::Sgd || self.decay_all || dims >= 2
    }
}

/// 0-dim tensors for the scalars of a step, reused every step.
pub struct StepScalars {
    inv_batch: Tensor,
    neg_lr: Tensor,
    neg_lr_over_batch: Tensor,
    weight_decay: Tensor,
    momentum: Tensor,
}

impl StepScalars {
    pub fn new(device: Device) -> Self {
        let z = || Tensor::zeros([], (Kind::Float, device));
        StepScalars { inv_batch: z(), neg_lr: z(), neg_lr_over_batch: z(), weight_decay: z(), momentum: z() }
    }
}

/// One replica's optimizer state on its device.
pub struct OptimizerState {
    cfg: OptimConfig,
    /// In the order of `cfg.kind.slots()`.
    slots: Vec<Tensor>,
    /// Working buffers the parameters' size: one for Nesterov SGD, two for Adam.
    scratch: Vec<Tensor>,
    decayed_params: Vec<Tensor>,
    decayed_grads: Vec<Tensor>,
    scalars: StepScalars,
}

impl OptimizerState {
    /// Zeroed state for the flat parameter buffer `params` laid out by `layout`.
    pub fn new(cfg: OptimConfig, params: &Tensor, layout: &Layout) -> Self {
        let slots = cfg.kind.slots().iter().map(|_| params.zeros_like()).collect();
        let scratch_count = match cfg.kind {
            OptimizerKind::Sgd => usize::from(cfg.nesterov && cfg.momentum != 0.0),
            OptimizerKind::Adam | OptimizerKind::AdamW => 2,
        };
        let scratch: Vec<Tensor> = (0..scratch_count).map(|_| params.zeros_like()).collect();
        // Contiguous runs of decayed tensors, as views of the parameters and the gradient.
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for (offset, numel, dims) in layout.segments() {
            if !cfg.decays(dims) || numel == 0 {
                continue;
            }
            match runs.last_mut() {
                Some((start, len)) if *start + *len == offset => *len += numel,
                _ => runs.push((offset, numel)),
            }
        }
        let view = |t: &Tensor| runs.iter().map(|&(o, n)| t.narrow(0, o, n)).collect::<Vec<_>>();
        OptimizerState {
            cfg,
            decayed_params: view(params),
            decayed_grads: scratch.first().map(view).unwrap_or_default(),
            slots,
            scratch,
            scalars: StepScalars::new(params.device()),
        }
    }

    /// The state slots by name (flat, like the parameters).
    pub fn slots(&self) -> impl Iterator<Item = (&'static str, &Tensor)> {
        self.cfg.kind.slots().iter().copied().zip(&self.slots)
    }

    /// Fills the slot `name` from `logical` (its tensors concatenated in logical order).
    pub fn load_slot(&self, name: &str, layout: &Layout, logical: &Tensor) {
        if let Some(i) = self.cfg.kind.slots().iter().position(|s| *s == name) {
            layout.load_logical(&self.slots[i], logical);
        }
    }

    /// Updates `param` from `grad_sum` (summed over `batch` samples) at learning rate `lr`;
    /// `step` counts optimizer steps, 1 on the first.
    pub fn step(&mut self, param: &mut Tensor, grad_sum: &Tensor, lr: f64, batch: usize, step: u64) {
        let c = &self.cfg;
        match c.kind {
            OptimizerKind::Sgd => {
                let sgd =
                    Sgd { lr, momentum: c.momentum, weight_decay: c.weight_decay, nesterov: c.nesterov };
                sgd.step(
                    param,
                    grad_sum,
                    &mut self.slots[0],
                    self.scratch.first_mut(),
                    batch,
                    &mut self.scalars,
                );
            }
            OptimizerKind::Adam | OptimizerKind::AdamW => {
                let adam = Adam {
                    lr,
                    betas: c.betas,
                    eps: c.eps,
                    weight_decay: c.weight_decay,
                    decoupled: c.kind == OptimizerKind::AdamW,
                };
                let (first, second) = self.slots.split_at_mut(1);
                let (grad, denom) = self.scratch.split_at_mut(1);
                let (exp_avg, exp_avg_sq, grad, denom) =
                    (&mut first[0], &mut second[0], &mut grad[0], &mut denom[0]);
                let tensors = AdamTensors {
                    exp_avg,
                    exp_avg_sq,
                    grad,
                    denom,
                    decayed_params: &mut self.decayed_params,
                    decayed_grads: &mut self.decayed_grads,
                };
                adam.step(param, grad_sum, tensors, batch, step, &mut self.scalars);
            }
        }
    }
}
