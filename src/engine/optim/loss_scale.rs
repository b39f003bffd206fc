//! Dynamic loss scaling, by the rules of `torch.amp.GradScaler` (torch 2.11,
//! `torch/amp/grad_scaler.py` and the `_amp_update_scale_` kernel): the loss is multiplied by the
//! scale before the backward pass so that small fp16 gradients do not flush to zero; after the
//! allreduce the gradient is unscaled and checked; a step whose gradient holds an inf or a NaN
//! is skipped (the weights and the optimizer state stay as they were) and the scale halves;
//! after `growth_interval` clean steps in a row it doubles (unless that overflows f32).
//!
//! The scale is an f32, as GradScaler keeps it, so the sequence of scales is PyTorch's bit for
//! bit. dpt-tui's loss is the sum over the batch where PyTorch scripts use the mean, so the
//! workers multiply their summed loss by `scale / batch` ([`DeviceScaler::loss_factor`]): the
//! scaled loss, and every fp16 gradient inside the backward pass, is then the one GradScaler
//! would see for the same scale, and the overflows happen at the same scales. Unscaling by
//! GradScaler's reciprocal of the scale gives the mean gradient, which the optimizer takes.
//!
//! During a run the state lives on the device ([`DeviceScaler`]), as GradScaler keeps it: the
//! check, the skip (by the fused optimizer kernels, which read `found_inf`) and the scale's
//! update never wait for the host; [`LossScaler`] is its host form, for checkpoints and rewind
//! points, and the rules' reference (the protocol's type, which checkpoints store).

use tch::Tensor;

use dpt_core::optim::loss_scale::{LossScaler, LossScaling, BACKOFF, GROWTH};

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

/// Whether a tensor checked by [`non_finite`] was finite (reads the device).
pub fn finite(found_inf: &Tensor) -> bool {
    found_inf.double_value(&[0]) == 0.0
}

/// GradScaler's state on the device during a run, so that no step reads the host: the scale
/// and its growth tracker, updated by GradScaler's own `_amp_update_scale_` kernel; the step's
/// `found_inf`, which the fused optimizer kernels read to skip an overflowed step; and the count
/// of skipped steps. Read to the host ([`DeviceScaler::host`]) only for a checkpoint or a
/// rewind point; a report window's figures go to the host without a wait
/// ([`DeviceScaler::report_figures`]).
pub struct DeviceScaler {
    settings: LossScaling,
    /// `[1]` float32, as GradScaler's `_scale`.
    scale: Tensor,
    /// `[1]` int32, as GradScaler's `_growth_tracker`.
    growth_tracker: Tensor,
    /// `[1]` float32: 1 when this step's gradient held an inf or a NaN.
    found_inf: Tensor,
    /// `[1]` float64: steps skipped since the run began.
    skipped: Tensor,
    /// `[1]` float64: `skipped` as the last report window counted it.
    reported: Tensor,
}

/// The loss scaler's state as float64 figures, `[scale, growth tracker, steps skipped]`,
/// with the settings that make it whole again on the host.
pub struct ScalerFigures {
    settings: LossScaling,
    /// On the scaler's device.
    pub figures: Tensor,
}

impl ScalerFigures {
    /// The state on the host, from `figures` (these figures, or their host copy once arrived).
    pub fn read(&self, figures: &Tensor) -> LossScaler {
        LossScaler {
            init: self.settings.init,
            scale: figures.double_value(&[0]) as f32,
            growth_tracker: u32::try_from(figures.double_value(&[1]) as i64).unwrap_or(0),
            skipped: figures.double_value(&[2]) as u64,
            growth_interval: self.settings.growth_interval,
        }
    }
}

impl DeviceScaler {
    /// `host`'s state on `device`.
    pub fn new(host: LossScaler, device: tch::Device) -> DeviceScaler {
        let on = |kind| (kind, device);
        DeviceScaler {
            settings: host.settings(),
            scale: Tensor::full([1], f64::from(host.scale), on(tch::Kind::Float)),
            growth_tracker: Tensor::full([1], i64::from(host.growth_tracker), on(tch::Kind::Int)),
            found_inf: Tensor::zeros([1], on(tch::Kind::Float)),
            skipped: Tensor::full([1], host.skipped as f64, on(tch::Kind::Double)),
            reported: Tensor::full([1], host.skipped as f64, on(tch::Kind::Double)),
        }
    }

    /// The state on the host (reads the device).
    pub fn host(&self) -> LossScaler {
        let figures = self.figures();
        figures.read(&figures.figures)
    }

    /// The state as figures on the device, for a host copy that does not wait
    /// ([`crate::device::landing::Landing`]) and is read once it has arrived.
    pub fn figures(&self) -> ScalerFigures {
        let _guard = tch::no_grad_guard();
        let figures = Tensor::cat(
            &[
                self.scale.to_kind(tch::Kind::Double),
                self.growth_tracker.to_kind(tch::Kind::Double),
                self.skipped.shallow_clone(),
            ],
            0,
        );
        ScalerFigures { settings: self.settings, figures }
    }

    /// Steps skipped since the run began (reads the device).
    pub fn skipped(&self) -> u64 {
        self.skipped.double_value(&[0]) as u64
    }

    /// A report window's figures on the device, without a read: `[scale, steps skipped since
    /// the last call]` (float64), a tensor of their own; the count starts again from here.
    pub fn report_figures(&mut self) -> Tensor {
        let _guard = tch::no_grad_guard();
        let newly = &self.skipped - &self.reported;
        self.reported.copy_(&self.skipped);
        Tensor::cat(&[self.scale.to_kind(tch::Kind::Double), newly], 0)
    }

    /// What the workers multiply their summed loss by before the backward pass, for a step of
    /// `batch` samples over all replicas: `scale / batch` (see the module's account), a 0-dim
    /// float32 computed on the scaler's device (a replica elsewhere takes a device copy).
    pub fn loss_factor(&self, batch: usize) -> Tensor {
        let _guard = tch::no_grad_guard();
        let factor = (self.scale.to_kind(tch::Kind::Double) / batch.max(1) as f64).to_kind(tch::Kind::Float);
        factor.reshape([])
    }

    /// Starts a step: nothing found yet.
    pub fn begin_step(&mut self) {
        let _ = self.found_inf.zero_();
    }

    /// Turns the reduced gradient `grad` (the scaled mean over the step's batch) into the mean
    /// gradient the optimizer takes, and checks it in the same pass, with GradScaler's own
    /// kernel (`_amp_foreach_non_finite_check_and_unscale_`), into the step's `found_inf` (a
    /// gradient on another device than the scaler's is checked there, into a flag of its own:
    /// every holder carries the same sum). The factor is computed on the device from the scale
    /// (nothing uploaded, nothing read).
    pub fn unscale(&mut self, grad: &mut Tensor) {
        let _guard = tch::no_grad_guard();
        let device = grad.device();
        // GradScaler's `_scale.double().reciprocal().float()`.
        let factor = self.scale.to_kind(tch::Kind::Double).reciprocal().to_kind(tch::Kind::Float);
        if device == self.found_inf.device() {
            grad.internal_amp_non_finite_check_and_unscale(&mut self.found_inf, &factor);
        } else {
            let mut found = Tensor::zeros([1], (tch::Kind::Float, device));
            grad.internal_amp_non_finite_check_and_unscale(&mut found, &factor.to_device(device));
            // Under --zero 2 each holder carries a shard of its own: an overflow in any of them
            // skips the step.
            let either = self.found_inf.maximum(&found.to_device(self.found_inf.device()));
            self.found_inf.copy_(&either);
        }
    }

    /// Under `--zero 2` across processes, each rank checked its own shards: an overflow found
    /// on any rank skips the step on every rank (the flag's maximum over `world`, on the
    /// device).
    pub fn agree(&mut self, world: &crate::dist::World) -> Result<(), crate::dist::DistError> {
        world.allreduce_in_place(&mut self.found_inf, dpt_sys::c10d::ReduceOp::Max)
    }

    /// The step's `found_inf` on `device`, for the fused optimizer kernels there.
    pub fn found_inf_on(&self, device: tch::Device) -> Tensor {
        self.found_inf.to_device(device)
    }

    /// Whether this step's gradient was finite, as a 0-dim bool on the device.
    pub fn clean(&self) -> Tensor {
        self.found_inf.eq(0.0).reshape([])
    }

    /// Ends the step: `_amp_update_scale_` moves the scale as [`LossScaler::update`] does, and
    /// an overflowed step is counted as skipped.
    pub fn end_step(&mut self) {
        let _guard = tch::no_grad_guard();
        let _ = self.scale.internal_amp_update_scale_(
            &self.growth_tracker,
            &self.found_inf,
            f64::from(GROWTH),
            f64::from(BACKOFF),
            i64::from(self.settings.growth_interval),
        );
        let _ = self.skipped.g_add_(&self.found_inf);
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
    fn the_device_scaler_moves_as_gradscalers_rules() {
        let cfg = LossScaling { init: 1024.0, growth_interval: 2 };
        let (mut host, mut device) =
            (LossScaler::new(cfg), DeviceScaler::new(LossScaler::new(cfg), tch::Device::Cpu));
        for clean in [true, false, true, true, false, true, true, true] {
            let mut grad = Tensor::from_slice(&[0.75f32, if clean { -3.0 } else { f32::INFINITY }]);
            device.begin_step();
            device.unscale(&mut grad);
            assert_eq!(bool::try_from(&device.clean()).expect("a bool"), clean);
            host.update(clean);
            device.end_step();
            assert_eq!(device.host(), host, "after a {} step", if clean { "clean" } else { "skipped" });
        }
        assert_eq!(device.skipped(), 2);
        assert_eq!(device.loss_factor(8).double_value(&[]), f64::from(host.scale) / 8.0);
    }

    #[test]
    fn never_grows_past_the_largest_f32() {
        let mut s = LossScaler::new(LossScaling { init: f32::MAX, growth_interval: 1 });
        s.update(true);
        assert_eq!((s.scale, s.growth_tracker), (f32::MAX, 0));
    }

    #[test]
    fn unscaling_gives_back_the_mean_gradient_and_finds_overflow() {
        let host = LossScaler::new(LossScaling { init: 65536.0, growth_interval: 2000 });
        let mut s = DeviceScaler::new(host, tch::Device::Cpu);
        let mut check = |values: &[f32]| {
            let mut g = Tensor::from_slice(values);
            s.begin_step();
            s.unscale(&mut g);
            (bool::try_from(&s.clean()).expect("a bool"), g)
        };
        // A 4-sample step's loss was multiplied by 65536 / 4: its gradient is 65536 times the mean.
        let (clean, g) = check(&[65536.0 * 0.5, -65536.0]);
        assert!(clean);
        assert_eq!(Vec::<f32>::try_from(&g).unwrap(), [0.5, -1.0]);
        assert!(!check(&[1.0, f32::INFINITY]).0);
        assert!(!check(&[f32::NAN, 1.0]).0);
        assert_eq!(s.loss_factor(4).double_value(&[]), 16384.0);
        // The same bits as GradScaler's scalar multiplication by its f32 reciprocal.
        let mut odd = DeviceScaler::new(
            LossScaler::new(LossScaling { init: 3.0, growth_interval: 2 }),
            tch::Device::Cpu,
        );
        let values = Tensor::from_slice(&[0.1f32, 7.3, -2.9e-3]);
        let mut fused = values.copy();
        odd.begin_step();
        odd.unscale(&mut fused);
        let factor = (1.0 / 3.0f64) as f32;
        assert!(fused.equal(&(&values * f64::from(factor))));
    }

    #[test]
    fn the_non_finite_check_agrees_with_isfinite_and_leaves_every_bit() {
        let values = [0.0f32, -0.0, f32::MIN_POSITIVE / 8.0, f32::MAX, -3.5, f32::MIN];
        let t = Tensor::from_slice(&values);
        assert!(finite(&non_finite(&t)));
        let bits =
            |t: &Tensor| Vec::<f32>::try_from(t).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t), values.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut with = values.to_vec();
            with.insert(3, bad);
            let t = Tensor::from_slice(&with);
            // torch's own answer on the same values.
            assert!(!bool::try_from(t.isfinite().all()).unwrap());
            assert!(!finite(&non_finite(&t)), "{bad}");
            assert_eq!(bits(&t), with.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }
}
