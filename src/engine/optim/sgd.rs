//! The SGD update on a flat parameter buffer: the reference programs' `sgd(params, lr, batch_size)` (summed
//! gradients divided by the global batch) with momentum, Nesterov momentum and weight decay as
//! `torch.optim.SGD` defines them (no dampening). The update allocates nothing: in-place kernels
//! with the step's scalars held in 0-dim tensors on the replica's device.

use tch::Tensor;

use super::StepScalars;

/// Hyper-parameters of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
}

impl Sgd {
    /// Updates `param` in place from `grad_sum` (the gradient summed over a global batch of
    /// `batch` samples). `momentum_buf` starts at zero, which equals PyTorch's first-step copy;
    /// `scratch` (the parameters' size, needed with Nesterov momentum only) holds the step's
    /// direction.
    pub fn step(
        &self,
        param: &mut Tensor,
        grad_sum: &Tensor,
        momentum_buf: &mut Tensor,
        scratch: Option<&mut Tensor>,
        batch: usize,
        s: &mut StepScalars,
    ) {
        let _guard = tch::no_grad_guard();
        let inv_b = 1.0 / batch as f64;
        if let Some(scratch) = scratch.filter(|_| self.momentum != 0.0 && self.nesterov) {
            // d = g / B + wd * p; buf = mu * buf + d; p -= lr * (d + mu * buf)
            let _ = s.inv_batch.fill_(inv_b);
            let _ = s.neg_lr.fill_(-self.lr);
            let _ = s.momentum.fill_(self.momentum);
            let _ = grad_sum.mul_out(scratch, &s.inv_batch);
            if self.weight_decay != 0.0 {
                let _ = s.weight_decay.fill_(self.weight_decay);
                let _ = scratch.addcmul_(param, &s.weight_decay);
            }
            let _ = momentum_buf.g_mul_scalar_(self.momentum);
            let _ = momentum_buf.g_add_(scratch);
            let _ = scratch.addcmul_(momentum_buf, &s.momentum);
            let _ = param.addcmul_(scratch, &s.neg_lr);
        } else if self.momentum != 0.0 {
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

    fn run(sgd: Sgd, steps: usize) -> Vec<f32> {
        let mut s = StepScalars::new(Device::Cpu);
        let mut p = Tensor::from_slice(&[1.0f32, -2.0]);
        let mut buf = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let mut scratch = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let g = Tensor::from_slice(&[4.0f32, 8.0]);
        for _ in 0..steps {
            sgd.step(&mut p, &g, &mut buf, Some(&mut scratch), 4, &mut s);
        }
        Vec::try_from(&p).unwrap()
    }

    #[test]
    fn matches_the_hand_computed_update() {
        let sgd = Sgd { lr: 0.5, momentum: 0.9, weight_decay: 0.1, nesterov: false };
        // d = g/4 + 0.1 p = [1.1, 1.8]; buf = d; p -= 0.5 d.
        let v = run(sgd, 1);
        assert!((v[0] - 0.45).abs() < 1e-6 && (v[1] + 2.9).abs() < 1e-6, "{v:?}");
        // d = [1 + 0.045, 2 - 0.29] = [1.045, 1.71]; buf = 0.9 [1.1, 1.8] + d = [2.035, 3.33].
        let v = run(sgd, 2);
        assert!(
            (v[0] - (0.45 - 0.5 * 2.035)).abs() < 1e-5 && (v[1] - (-2.9 - 0.5 * 3.33)).abs() < 1e-5,
            "{v:?}"
        );
    }

    #[test]
    fn nesterov_looks_ahead_along_the_momentum() {
        let sgd = Sgd { lr: 0.5, momentum: 0.9, weight_decay: 0.0, nesterov: true };
        // d = [1, 2]; buf = d; p -= 0.5 (d + 0.9 buf) = 0.5 * 1.9 d.
        let v = run(sgd, 1);
        assert!((v[0] - (1.0 - 0.95)).abs() < 1e-6 && (v[1] - (-2.0 - 1.9)).abs() < 1e-6, "{v:?}");
    }

    #[test]
    fn plain_sgd_with_weight_decay() {
        let v = run(Sgd { lr: 0.5, momentum: 0.0, weight_decay: 0.1, nesterov: false }, 1);
        assert!((v[0] - 0.45).abs() < 1e-6 && (v[1] + 2.9).abs() < 1e-6, "{v:?}");
    }
}
