//! The optimizer step on a flat parameter buffer: the seed's `sgd(params, lr, batch_size)`
//! (summed gradients divided by the global batch) with momentum and weight decay as
//! `torch.optim.SGD` defines them (no dampening, no Nesterov).

use tch::Tensor;

/// Hyper-parameters of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
}

impl Sgd {
    /// Updates `param` in place from `grad_sum` (the gradient summed over a global batch of
    /// `batch` samples). `momentum_buf` starts at zero, which equals PyTorch's first-step copy.
    pub fn step(&self, param: &mut Tensor, grad_sum: &Tensor, momentum_buf: &mut Tensor, batch: usize) {
        let _guard = tch::no_grad_guard();
        let mut d = grad_sum * (1.0 / batch as f64);
        if self.weight_decay != 0.0 {
            let _ = d.g_add_(&(&*param * self.weight_decay));
        }
        if self.momentum != 0.0 {
            let _ = momentum_buf.g_mul_scalar_(self.momentum);
            let _ = momentum_buf.g_add_(&d);
            d = momentum_buf.shallow_clone();
        }
        let _ = param.g_sub_(&(d * self.lr));
    }
}

#[cfg(test)]
mod tests {
    use super::Sgd;
    use tch::{Kind, Tensor};

    #[test]
    fn matches_the_hand_computed_update() {
        let sgd = Sgd { lr: 0.5, momentum: 0.9, weight_decay: 0.1 };
        let mut p = Tensor::from_slice(&[1.0f32, -2.0]);
        let mut buf = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu));
        let g = Tensor::from_slice(&[4.0f32, 8.0]);
        sgd.step(&mut p, &g, &mut buf, 4);
        // d = g/4 + 0.1 p = [1.1, 1.8]; buf = d; p -= 0.5 d.
        let v: Vec<f32> = Vec::try_from(&p).unwrap();
        assert!((v[0] - 0.45).abs() < 1e-6 && (v[1] + 2.9).abs() < 1e-6, "{v:?}");
        sgd.step(&mut p, &g, &mut buf, 4);
        // d = [1 + 0.045, 2 - 0.29] = [1.045, 1.71]; buf = 0.9 [1.1, 1.8] + d = [2.035, 3.33].
        let v: Vec<f32> = Vec::try_from(&p).unwrap();
        assert!(
            (v[0] - (0.45 - 0.5 * 2.035)).abs() < 1e-5 && (v[1] - (-2.9 - 0.5 * 3.33)).abs() < 1e-5,
            "{v:?}"
        );
    }
}
