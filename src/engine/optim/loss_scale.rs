//! Dynamic loss scaling, by the rules of `torch.amp.GradScaler` (torch 2.11,
//! `torch/amp/grad_scaler.py` and the `_amp_update_scale_` kernel): the loss is multiplied by the
//! scale before the backward pass so that small fp16 gradients do not flush to zero; after the
//! allreduce the gradient is unscaled and checked; a step whose gradient holds an inf or a NaN
//! is skipped (the weights and the optimizer state stay as they were) and the scale halves;
//! after `growth_interval` clean steps in a row it doubles (unless that overflows f32).
//!
//! The scale is an f32, as GradScaler keeps it, so the sequence of scales is PyTorch's bit for
//! bit. dpt-tui's loss is the sum over the batch where PyTorch scripts use the mean, so the
//! workers multiply their summed loss by `scale / batch` ([`LossScaler::loss_factor`]): the
//! scaled loss, and every fp16 gradient inside the backward pass, is then the one GradScaler
//! would see for the same scale, and the overflows happen at the same scales.

use serde::{Deserialize, Serialize};
use tch::Tensor;

/// GradScaler's `growth_factor` and `backoff_factor` (its defaults; rarely changed).
const GROWTH: f32 = 2.0;
const BACKOFF: f32 = 0.5;

pub use dpt_protocol::optim::loss_scale::LossScaling;

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

    /// What each worker multiplies its summed loss by before the backward pass, for a step of
    /// `batch` samples over all replicas.
    pub fn loss_factor(&self, batch: usize) -> f64 {
        f64::from(self.scale) / batch.max(1) as f64
    }

    /// Turns the reduced gradient `grad` of a step of `batch` samples back into the summed
    /// gradient the optimizer takes, on the device, and checks it in the same pass, with
    /// GradScaler's own kernel (`_amp_foreach_non_finite_check_and_unscale_`). Returns its
    /// `found_inf`: one element, 1 when a value was not finite; reading it is the step's one
    /// device sync, as `GradScaler.step` reads it (no full-size bool tensor).
    pub fn unscale(&self, grad: &mut Tensor, batch: usize) -> Tensor {
        let _guard = tch::no_grad_guard();
        // GradScaler multiplies by the f32 of the scale's reciprocal computed in double; the
        // batch's factor joins it in f32, as a scalar multiplication would.
        let inv = (1.0 / f64::from(self.scale)) as f32;
        let factor = (f64::from(inv) * batch.max(1) as f64) as f32;
        // Filled on the device (a fill kernel queued on the stream), not uploaded: a copy from
        // pageable host memory would wait for the device to drain first.
        let inv_scale = Tensor::full([1], f64::from(factor), (tch::Kind::Float, grad.device()));
        let mut found_inf = Tensor::zeros([1], (tch::Kind::Float, grad.device()));
        grad.internal_amp_non_finite_check_and_unscale(&mut found_inf, &inv_scale);
        found_inf
    }

    /// Whether `t` holds a NaN or an infinity, as a one-element tensor on its device (not 0:
    /// it does), with the same kernel at a factor of 1, which leaves every value as it is: no
    /// full-size temporary (`isfinite().all()` makes a bool per element) and no host read.
    pub fn non_finite(t: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        let one = Tensor::ones([1], (tch::Kind::Float, t.device()));
        let mut found = Tensor::zeros([1], (tch::Kind::Float, t.device()));
        t.shallow_clone().internal_amp_non_finite_check_and_unscale(&mut found, &one);
        found
    }

    /// Whether an unscaled gradient was finite, from the `found_inf` [`LossScaler::unscale`]
    /// (or [`LossScaler::non_finite`]) returned.
    pub fn finite(found_inf: &Tensor) -> bool {
        found_inf.double_value(&[0]) == 0.0
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_overflow_and_doubles_after_the_interval() {
        let mut s = LossScaler::new(LossScaling { init: 1024.0, growth_interval: 2 });
        let mut scales = Vec::new();
        for clean in [true, false, true, true, false, true] {
            s.update(clean);
            scales.push(s.scale);
        }
        assert_eq!(scales, [1024.0, 512.0, 512.0, 1024.0, 512.0, 512.0]);
        assert_eq!((s.skipped, s.growth_tracker), (2, 1));
    }

    #[test]
    fn never_grows_past_the_largest_f32() {
        let mut s = LossScaler::new(LossScaling { init: f32::MAX, growth_interval: 1 });
        s.update(true);
        assert_eq!((s.scale, s.growth_tracker), (f32::MAX, 0));
    }

    #[test]
    fn unscaling_gives_back_the_summed_gradient_and_finds_overflow() {
        let s = LossScaler::new(LossScaling { init: 65536.0, growth_interval: 2000 });
        let mut g = Tensor::from_slice(&[65536.0f32 * 0.5 / 4.0, -65536.0 / 4.0]);
        assert!(LossScaler::finite(&s.unscale(&mut g, 4)));
        assert_eq!(Vec::<f32>::try_from(&g).unwrap(), [0.5, -1.0]);
        let mut bad = Tensor::from_slice(&[1.0f32, f32::INFINITY]);
        assert!(!LossScaler::finite(&s.unscale(&mut bad, 4)));
        let mut nan = Tensor::from_slice(&[f32::NAN, 1.0]);
        assert!(!LossScaler::finite(&s.unscale(&mut nan, 4)));
        // The same bits as a scalar multiplication by the f32 factor (the kernel's arithmetic).
        let odd = LossScaler::new(LossScaling { init: 3.0, growth_interval: 2 });
        let values = Tensor::from_slice(&[0.1f32, 7.3, -2.9e-3]);
        let mut fused = values.copy();
        assert!(LossScaler::finite(&odd.unscale(&mut fused, 5)));
        let factor = ((1.0 / 3.0f64) as f32 as f64 * 5.0) as f32;
        assert!(fused.equal(&(&values * f64::from(factor))));
        assert!((s.loss_factor(4) - 16384.0).abs() < 1e-9);
    }

    #[test]
    fn the_non_finite_check_agrees_with_isfinite_and_leaves_every_bit() {
        let values = [0.0f32, -0.0, f32::MIN_POSITIVE / 8.0, f32::MAX, -3.5, f32::MIN];
        let t = Tensor::from_slice(&values);
        assert!(LossScaler::finite(&LossScaler::non_finite(&t)));
        let bits =
            |t: &Tensor| Vec::<f32>::try_from(t).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t), values.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut with = values.to_vec();
            with.insert(3, bad);
            let t = Tensor::from_slice(&with);
            // torch's own answer on the same values.
            assert!(!bool::try_from(t.isfinite().all()).unwrap());
            assert!(!LossScaler::finite(&LossScaler::non_finite(&t)), "{bad}");
            assert_eq!(bits(&t), with.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }
}
