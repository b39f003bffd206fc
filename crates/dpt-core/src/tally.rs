//! The one accumulator of training figures: a [`Tally`] of loss, correct predictions, samples
//! and seconds. Workers report one per window and per evaluation, the coordinator sums them per
//! report window, per epoch and over finished epochs, and a checkpoint stores the epoch in
//! progress as one.

use serde::{Deserialize, Serialize};

/// Sums of training or test figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Summed per-sample loss.
    pub loss: f64,
    pub correct: f64,
    pub samples: f64,
    pub seconds: f64,
}

impl Tally {
    pub fn add(&mut self, t: Tally) {
        self.loss += t.loss;
        self.correct += t.correct;
        self.samples += t.samples;
        self.seconds += t.seconds;
    }

    /// Mean loss per sample.
    pub fn mean_loss(&self) -> f64 {
        self.loss / self.samples.max(1.0)
    }

    pub fn accuracy(&self) -> f64 {
        self.correct / self.samples.max(1.0)
    }

    /// Samples per second.
    pub fn throughput(&self) -> f64 {
        self.samples / self.seconds.max(1e-9)
    }
}
