//! Which evaluation counts as the best (`--best-metric`); keeping the best ones and stopping
//! early are the engine's (`engine::best`).

use serde::{Deserialize, Serialize};

/// What "better" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BestMetric {
    /// The evaluated set's accuracy (higher is better).
    #[default]
    ValAcc,
    /// The evaluated set's loss (lower is better).
    ValLoss,
}

impl std::str::FromStr for BestMetric {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "val_acc" | "test_acc" | "acc" => Ok(BestMetric::ValAcc),
            "val_loss" | "test_loss" | "loss" => Ok(BestMetric::ValLoss),
            _ => Err(format!("unknown metric '{s}'; use val_acc or val_loss")),
        }
    }
}

impl BestMetric {
    pub fn name(self) -> &'static str {
        match self {
            BestMetric::ValAcc => "val_acc",
            BestMetric::ValLoss => "val_loss",
        }
    }

    /// The metric of an evaluation's mean loss and accuracy.
    pub fn of(self, loss: f64, acc: f64) -> f64 {
        match self {
            BestMetric::ValAcc => acc,
            BestMetric::ValLoss => loss,
        }
    }

    /// Whether `a` is better than `b` (a NaN is never better).
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            BestMetric::ValAcc => a > b,
            BestMetric::ValLoss => a < b,
        }
    }
}
