//! The optimizer step on a flat parameter buffer: the seed's `sgd(params, lr, batch_size)`
//! (summed gradients divided by the global batch) with momentum and weight decay as
//! `torch.optim.SGD` defines them (no dampening, no Nesterov). The update allocates nothing:
//! in-place kernels with the step's scalars held in 0-dim tensors on the replica's device.

use tch::{Device, Kind, Tensor};

/// Hyper-parameters of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
}

/// 0-dim tensors for the scalars of a step, reused every step.
pub struct StepScalars {
    inv_batch: Tensor,
    neg_lr: Tensor,
    neg_lr_over_batch: Tensor,
    weight_decay: Tensor,
}

impl StepScalars {
    pub fn new(device: Device) -> Self {
        let z = || Tensor::zeros([], (Kind::Float, device));
        StepScalars { inv_batch: z(), neg_lr: z(), neg_lr_over_batch: z(), weight_decay: z() }
    }
}

impl Sgd {
    /// Updates `param` in place from `grad_sum` (the gradient summed over a global batch of
    /// `batch` samples). `momentum_buf` starts at zero, which equals PyTorch's first-step copy.
    pub fn step(
        &self,
        param: &mut Tensor,
        grad_sum: &Tensor,
        momentum_buf: &mut Tensor,
        batch: usize,
        s: &mut StepScalars,
    ) {
        let _guard = tch::no_grad_guard();
        let inv_b = 1.0 / batch as f64;
        if self.momentum != 0.0 {
            // buf = mu * buf + (g / B + wd * p); p -= lr * buf
            let _ = s.inv_batch.fill_(inv_b);
            let _ = s.neg_lr.fill_(-self.lr);
            let _ = momentum_buf.g_mul_scalar_(self.momentum);
            let _ = momentum_buf.addcmul_(grad_sum, &s.inv_batch);
            if self.weight_decay != 0.0 {
                let _ = s.weight_decay.fill_(self.weight_decay);
                let _ = momentum_buf.addcmul_(param, &s.weight_decay);
            }
            let _ = param.addcmul_(momentum_buf, &s.neg_lr);
        } else {
            // p -= lr * (g / B + wd * p)  ==  p * (1 - lr wd) - (lr / B) g
            if self.weight_decay != 0.0 {
                let _ = param.g_mul_scalar_(1.0 - self.lr * self.weight_decay);
            }
            let _ = s.neg_lr_over_batch.fill_(-self.lr * inv_b);
            let _ = param.addcmul_(grad_sum, &s.neg_lr_over_batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Sgd, StepScalars};
    use tch::{Device, Kind, Tensor};

    #[test]
    fn matches_the_hand_computed_update() {
        let sgd = Sgd { lr: 0.5, momentum: 0.9, weight_decay: 0.1 };
        let mut s = StepScalars::new(Device::Cpu);
        let mut p = Tensor::from_slice(&[1.0f32, -2.0]);
        let mut buf = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let g = Tensor::from_slice(&[4.0f32, 8.0]);
        sgd.step(&mut p, &g, &mut buf, 4, &mut s);
        // d = g/4 + 0.1 p = [1.1, 1.8]; buf = d; p -= 0.5 d.
        let v: Vec<f32> = Vec::try_from(&p).unwrap();
        assert!((v[0] - 0.45).abs() < 1e-6 && (v[1] + 2.9).abs() < 1e-6, "{v:?}");
        sgd.step(&mut p, &g, &mut buf, 4, &mut s);
        // d = [1 + 0.045, 2 - 0.29] = [1.045, 1.71]; buf = 0.9 [1.1, 1.8] + d = [2.035, 3.33].
        let v: Vec<f32> = Vec::try_from(&p).unwrap();
        assert!(
            (v[0] - (0.45 - 0.5 * 2.035)).abs() < 1e-5 && (v[1] - (-2.9 - 0.5 * 3.33)).abs() < 1e-5,
            "{v:?}"
        );
    }

    #[test]
    fn plain_sgd_with_weight_decay() {
        let sgd = Sgd { lr: 0.5, momentum: 0.0, weight_decay: 0.1 };
        let mut s = StepScalars::new(Device::Cpu);
        let mut p = Tensor::from_slice(&[1.0f32, -2.0]);
        let mut buf = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        sgd.step(&mut p, &Tensor::from_slice(&[4.0f32, 8.0]), &mut buf, 4, &mut s);
        let v: Vec<f32> = Vec::try_from(&p).unwrap();
        assert!((v[0] - 0.45).abs() < 1e-6 && (v[1] + 2.9).abs() < 1e-6, "{v:?}");
    }
}
