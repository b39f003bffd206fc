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

impl BestMetric {
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

crate::names!(BestMetric, "metric", {
    ValAcc => "val_acc" | "test_acc" | "acc",
    ValLoss => "val_loss" | "test_loss" | "loss",
});
