//! Learning-rate schedules, stepped once per optimizer step. For optimizer step `t` (0-based)
//! of `T` in the run, base rate `lr`, warm-up `W` steps and floor `min_lr`:
//!
//! - warm-up (every schedule but onecycle): `lr·(t+1)/W` while `t < W`
//!   (`torch.optim.lr_scheduler.LinearLR(start_factor=1/W, total_iters=W-1)`);
//! - `constant`: `lr`;
//! - `cosine`: `min_lr + (lr − min_lr)·(1 + cos(π·(t − W)/(T − W)))/2`
//!   (`CosineAnnealingLR(T_max=T−W, eta_min=min_lr)` after the warm-up);
//! - `linear`: `lr + (min_lr − lr)·(t − W)/(T − W)`
//!   (`LinearLR(start_factor=1, end_factor=min_lr/lr, total_iters=T−W)` after the warm-up);
//! - `step:E1,E2,…`: `lr·γ^k`, `k` the number of milestones `Ei ≤ t / steps_per_epoch`
//!   (`MultiStepLR(milestones, gamma=γ)` stepped per epoch; γ = `--lr-gamma`, 0.1);
//! - `onecycle`: `OneCycleLR(max_lr=lr, total_steps=T, pct_start=W/T or 0.3,
//!   anneal_strategy='cos', div_factor=25, final_div_factor=1e4)`: from `lr/25` up to `lr` over
//!   the first `pct_start·T − 1` steps, then down to `lr/25/1e4` at step `T − 1`, both halves
//!   cosine.
//!
//! The live lr key scales the schedule from the step it is pressed on: the engine multiplies
//! every later value by `new lr / scheduled lr`.

use std::f64::consts::PI;

use serde::{Deserialize, Serialize};

/// A schedule's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Shape {
    #[default]
    Constant,
    Cosine,
    Linear,
    /// Milestones in epochs.
    Step {
        milestones: Vec<usize>,
    },
    OneCycle,
}

impl std::str::FromStr for Shape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "constant" => Ok(Shape::Constant),
            "cosine" => Ok(Shape::Cosine),
            "linear" => Ok(Shape::Linear),
            "onecycle" => Ok(Shape::OneCycle),
            _ => {
                let bad = || {
                    format!(
                        "unknown schedule '{s}'; use constant, cosine, linear, onecycle or step:E1,E2,… (epochs, increasing)"
                    )
                };
                let list = s.strip_prefix("step:").ok_or_else(bad)?;
                let milestones: Vec<usize> = list
                    .split(',')
                    .map(|e| e.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad())?;
                if milestones.is_empty() || milestones.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(bad());
                }
                Ok(Shape::Step { milestones })
            }
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Constant => f.write_str("constant"),
            Shape::Cosine => f.write_str("cosine"),
            Shape::Linear => f.write_str("linear"),
            Shape::OneCycle => f.write_str("onecycle"),
            Shape::Step { milestones } => {
                let list: Vec<String> = milestones.iter().map(ToString::to_string).collect();
                write!(f, "step:{}", list.join(","))
            }
        }
    }
}

/// A run's schedule settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub shape: Shape,
    pub warmup_steps: usize,
    pub min_lr: f64,
    /// The factor of each `step:` milestone.
    pub gamma: f64,
}

crate::named_in_records!(Schedule);

impl Default for Schedule {
    fn default() -> Self {
        Schedule { shape: Shape::Constant, warmup_steps: 0, min_lr: 0.0, gamma: 0.1 }
    }
}

/// A bad schedule request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("--warmup-steps {warmup} leaves no step of the {total} in the run for the schedule; use fewer warm-up steps")]
    WarmupTooLong { warmup: usize, total: usize },
    #[error("--min-lr must be a finite number in [0, --lr), got {0}")]
    BadMinLr(f64),
    #[error("--lr-gamma must be a positive finite number, got {0}")]
    BadGamma(f64),
    #[error("onecycle sets its own floor (lr/25/1e4, as PyTorch's OneCycleLR); drop --min-lr")]
    OneCycleMinLr,
}

impl Schedule {
    /// Checks the settings for a run of `total` optimizer steps at base rate `lr`.
    pub fn check(&self, lr: f64, total: usize) -> Result<(), ScheduleError> {
        if !(self.min_lr.is_finite() && self.min_lr >= 0.0 && self.min_lr < lr) {
            return Err(ScheduleError::BadMinLr(self.min_lr));
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0) {
            return Err(ScheduleError::BadGamma(self.gamma));
        }
        if self.shape == Shape::OneCycle && self.min_lr != 0.0 {
            return Err(ScheduleError::OneCycleMinLr);
        }
        let needs_room = !matches!(self.shape, Shape::Constant | Shape::Step { .. });
        if self.warmup_steps > 0 && (self.warmup_steps > total || (needs_room && self.warmup_steps >= total))
        {
            return Err(ScheduleError::WarmupTooLong { warmup: self.warmup_steps, total });
        }
        Ok(())
    }

    /// The learning rate of optimizer step `t` (0-based) of `total`, with `steps_per_epoch`.
    pub fn lr_at(&self, lr: f64, t: usize, total: usize, steps_per_epoch: usize) -> f64 {
        let w = self.warmup_steps;
        let (min, span) = (self.min_lr, total.saturating_sub(w).max(1) as f64);
        let x = (t.saturating_sub(w) as f64 / span).min(1.0);
        match &self.shape {
            Shape::OneCycle => one_cycle(lr, t, total, if w > 0 { w as f64 / total as f64 } else { 0.3 }),
            _ if t < w => lr * (t + 1) as f64 / w as f64,
            Shape::Constant => lr,
            Shape::Cosine => min + (lr - min) * (1.0 + (PI * x).cos()) / 2.0,
            Shape::Linear => lr + (min - lr) * x,
            Shape::Step { milestones } => {
                let epoch = t / steps_per_epoch.max(1);
                let passed = milestones.iter().filter(|&&m| m <= epoch).count();
                lr * self.gamma.powi(passed as i32)
            }
        }
    }

    /// The schedule in words (`cosine, 100 warm-up steps, min lr 0`).
    pub fn describe(&self) -> String {
        let mut s = self.shape.to_string();
        if self.warmup_steps > 0 {
            s += &format!(", {} warm-up steps", self.warmup_steps);
        }
        match self.shape {
            Shape::Cosine | Shape::Linear => s += &format!(", min lr {}", self.min_lr),
            Shape::Step { .. } => s += &format!(", gamma {}", self.gamma),
            _ => {}
        }
        s
    }
}

/// A run's learning rate over its steps: the schedule from the base rate, times the scale the
/// live lr key set (1 until then).
#[derive(Debug, Clone, PartialEq)]
pub struct LrPlan {
    pub base: f64,
    pub schedule: Schedule,
    /// Optimizer steps in the whole run.
    pub total: usize,
    pub steps_per_epoch: usize,
    pub scale: f64,
}

impl LrPlan {
    /// The scheduled rate of step `t`, unscaled.
    pub fn scheduled(&self, t: usize) -> f64 {
        self.schedule.lr_at(self.base, t, self.total, self.steps_per_epoch)
    }

    /// The rate step `t` trains with.
    pub fn at(&self, t: usize) -> f64 {
        self.scheduled(t) * self.scale
    }

    /// Scales the schedule so that step `t` trains at `lr`, and every later step in proportion.
    pub fn rescale_to(&mut self, t: usize, lr: f64) {
        self.scale = lr / self.scheduled(t).max(f64::MIN_POSITIVE);
    }
}

/// PyTorch's `OneCycleLR` (two phases, cosine annealing) at step `t` of `total`.
fn one_cycle(max_lr: f64, t: usize, total: usize, pct_start: f64) -> f64 {
    let initial = max_lr / 25.0;
    let floor = initial / 1e4;
    let up_end = pct_start * total as f64 - 1.0;
    let down_end = total as f64 - 1.0;
    let anneal = |start: f64, end: f64, pct: f64| end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0);
    let t = t as f64;
    if t <= up_end {
        anneal(initial, max_lr, if up_end > 0.0 { t / up_end } else { 1.0 })
    } else {
        anneal(max_lr, floor, (t - up_end) / (down_end - up_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_with_warm_up_follows_the_formula() {
        let s = Schedule { shape: Shape::Cosine, warmup_steps: 4, min_lr: 0.01, gamma: 0.1 };
        let lrs: Vec<f64> = (0..14).map(|t| s.lr_at(1.0, t, 14, 7)).collect();
        assert_eq!(&lrs[..4], &[0.25, 0.5, 0.75, 1.0]);
        assert_eq!(lrs[4], 1.0);
        assert!((lrs[9] - (0.01 + 0.99 * 0.5)).abs() < 1e-12, "half-way: {}", lrs[9]);
        assert!(lrs.windows(2).skip(4).all(|w| w[1] < w[0]));
    }

    #[test]
    fn the_live_key_scales_the_rest_of_the_schedule() {
        let schedule = Schedule { shape: Shape::Linear, ..Schedule::default() };
        let mut plan = LrPlan { base: 1.0, schedule, total: 10, steps_per_epoch: 5, scale: 1.0 };
        assert_eq!(plan.at(5), 0.5);
        plan.rescale_to(5, 0.25);
        assert_eq!((plan.at(5), plan.at(6)), (0.25, 0.2));
    }

    #[test]
    fn step_milestones_count_epochs() {
        let s: Shape = "step:2,4".parse().unwrap();
        let s = Schedule { shape: s, ..Schedule::default() };
        let at = |t| s.lr_at(1.0, t, 60, 10);
        assert_eq!((at(19), at(20), at(39), at(40)), (1.0, 0.1, 0.1, 0.1 * 0.1));
        assert_eq!(s.shape.to_string(), "step:2,4");
    }

    #[test]
    fn bad_requests_are_named() {
        for bad in ["step:", "step:3,2", "cos", "step:a"] {
            assert!(bad.parse::<Shape>().is_err(), "{bad}");
        }
        let s = Schedule { shape: Shape::Cosine, warmup_steps: 10, ..Schedule::default() };
        assert_eq!(s.check(0.1, 10), Err(ScheduleError::WarmupTooLong { warmup: 10, total: 10 }));
        let s = Schedule { min_lr: 0.2, ..Schedule::default() };
        assert_eq!(s.check(0.1, 10), Err(ScheduleError::BadMinLr(0.2)));
    }
}
