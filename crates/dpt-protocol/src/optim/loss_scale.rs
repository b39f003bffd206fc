//! `--loss-scale dynamic`'s settings: torch.amp.GradScaler's `init_scale` and
//! `growth_interval`. The scaler itself, with PyTorch's arithmetic, is the engine's
//! (`engine::optim::loss_scale`).

use serde::{Deserialize, Serialize};

/// `--loss-scale dynamic` and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScaling {
    /// The first scale (`init_scale`, 65536 by default).
    pub init: f32,
    /// Clean steps in a row before the scale doubles (`growth_interval`, 2000 by default).
    pub growth_interval: u32,
}

impl Default for LossScaling {
    fn default() -> Self {
        LossScaling { init: 65536.0, growth_interval: 2000 }
    }
}

impl LossScaling {
    /// Whether the settings can run: a finite positive first scale, a non-zero interval.
    pub fn valid(&self) -> bool {
        self.init.is_finite() && self.init > 0.0 && self.growth_interval > 0
    }

    /// The settings in words.
    pub fn describe(&self) -> String {
        format!("dynamic loss scale from {}, doubled after {} clean steps", self.init, self.growth_interval)
    }
}
