//! Which update rule a run uses and its hyper-parameters ([`OptimConfig`]), and the lr's
//! schedule and loss scaling settings; the update itself is the engine's (`engine::optim`).

pub mod loss_scale;
pub mod schedule;
pub mod zero;

pub use zero::{ShardGrid, Span, Zero};

use serde::{Deserialize, Serialize};

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
    /// The ZeRO stage: whether each replica holds only its shard of the optimizer state.
    #[serde(default)]
    pub zero: Zero,
}

crate::named_in_records!(OptimConfig);

impl Default for OptimConfig {
    /// The default model's (LeNet's) SGD.
    fn default() -> Self {
        let d = crate::model::ModelKind::Lenet.defaults();
        OptimConfig::sgd(d.lr, d.momentum, 0.0)
    }
}

impl OptimConfig {
    /// Plain SGD as the reference programs use it.
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
            zero: Zero::Off,
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

crate::names!(OptimizerKind, "optimizer", { Sgd => "sgd", Adam => "adam", AdamW => "adamw" });
