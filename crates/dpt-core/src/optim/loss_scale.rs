//! `--loss-scale dynamic`'s settings (torch.amp.GradScaler's `init_scale` and
//! `growth_interval`) and the scaler's state on the host, as checkpoints keep it, with
//! GradScaler's rules for moving it (`_amp_update_scale_`, torch 2.11). The scaler on the device,
//! which a run uses, is the engine's (`engine::optim::loss_scale`).

use serde::{Deserialize, Serialize};

/// `--loss-scale dynamic` and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScaling {
    /// The first scale (`init_scale`, 65536 by default).
    pub init: f32,
    /// Clean steps in a row before the scale doubles (`growth_interval`, 2000 by default).
    pub growth_interval: u32,
}

crate::named_in_records!(LossScaling);

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

/// GradScaler's `growth_factor` and `backoff_factor` (its defaults; rarely changed).
pub const GROWTH: f32 = 2.0;
pub const BACKOFF: f32 = 0.5;

/// The scaler's state: what a checkpoint keeps so that a resumed run scales as a straight one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    /// The settings' first scale (the run's setting, kept for a resume).
    pub init: f32,
    pub scale: f32,
    /// Clean steps since the last change of the scale (`_growth_tracker`).
    pub growth_tracker: u32,
    /// Steps skipped since the run began (the optimizer's own step count leaves them out).
    pub skipped: u64,
    pub growth_interval: u32,
}

impl LossScaler {
    pub fn new(cfg: LossScaling) -> Self {
        LossScaler {
            init: cfg.init,
            scale: cfg.init,
            growth_tracker: 0,
            skipped: 0,
            growth_interval: cfg.growth_interval,
        }
    }

    /// The settings it runs by.
    pub fn settings(&self) -> LossScaling {
        LossScaling { init: self.init, growth_interval: self.growth_interval }
    }

    /// `_amp_update_scale_`: after a step whose gradient was finite (`clean`) or not.
    pub fn update(&mut self, clean: bool) {
        if !clean {
            self.scale *= BACKOFF;
            self.growth_tracker = 0;
            self.skipped += 1;
            return;
        }
        let successful = self.growth_tracker + 1;
        if successful == self.growth_interval {
            let grown = self.scale * GROWTH;
            if grown.is_finite() {
                self.scale = grown;
            }
            self.growth_tracker = 0;
        } else {
            self.growth_tracker = successful;
        }
    }
}
