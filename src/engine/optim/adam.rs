//! The Adam and AdamW updates on a flat parameter buffer, operation for operation as
//! `torch.optim.Adam` / `torch.optim.AdamW` compute them on one tensor (no AMSGrad): the moments
//! by `lerp_` and `mul_`/`addcmul_`, the bias corrections in double precision on the host, and
//! the step as `addcdiv_`. Weight decay is L2 for Adam (added to the gradient) and decoupled for
//! AdamW (`p *= 1 - lr * wd` first), applied only to the tensors the decay rule selects. The
//! update allocates nothing on the device.

use tch::Tensor;

use super::StepScalars;

/// Hyper-parameters of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adam {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW's decoupled decay instead of Adam's L2 term.
    pub decoupled: bool,
}

/// One replica's Adam tensors: the two moments (checkpointed) and two scratch buffers.
pub struct AdamTensors<'a> {
    pub exp_avg: &'a mut Tensor,
    pub exp_avg_sq: &'a mut Tensor,
    /// Holds the mean gradient, then the scaled first moment.
    pub grad: &'a mut Tensor,
    /// Holds the denominator.
    pub denom: &'a mut Tensor,
    /// Views of the parameters that decay, and the same ranges of `grad`.
    pub decayed_params: &'a mut [Tensor],
    pub decayed_grads: &'a mut [Tensor],
}

impl Adam {
    /// Updates `param` in place from `grad_sum` (summed over a global batch of `batch`
    /// samples); `step` is PyTorch's step count after this step (1 on the first).
    pub fn step(
        &self,
        param: &mut Tensor,
        grad_sum: &Tensor,
        t: AdamTensors<'_>,
        batch: usize,
        step: u64,
        s: &mut StepScalars,
    ) {
        let _guard = tch::no_grad_guard();
        let (beta1, beta2) = self.betas;
        let _ = s.inv_batch.fill_(1.0 / batch as f64);
        let _ = grad_sum.mul_out(t.grad, &s.inv_batch);
        if self.weight_decay != 0.0 {
            if self.decoupled {
                for p in t.decayed_params.iter_mut() {
                    let _ = p.g_mul_scalar_(1.0 - self.lr * self.weight_decay);
                }
            } else {
                let _ = s.weight_decay.fill_(self.weight_decay);
                for (g, p) in t.decayed_grads.iter_mut().zip(t.decayed_params.iter()) {
                    let _ = g.addcmul_(p, &s.weight_decay);
                }
            }
        }
        let _ = t.exp_avg.lerp_(t.grad, 1.0 - beta1);
        // exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
        let _ = s.momentum.fill_(1.0 - beta2);
        let _ = t.grad.mul_out(t.denom, &s.momentum);
        let _ = t.exp_avg_sq.g_mul_scalar_(beta2);
        let _ = t.exp_avg_sq.addcmul_(t.denom, t.grad);
        let bias_correction1 = 1.0 - beta1.powf(step as f64);
        let bias_correction2 = 1.0 - beta2.powf(step as f64);
        let step_size = self.lr / bias_correction1;
        let _ = t.exp_avg_sq.sqrt_out(t.denom);
        let _ = t.denom.g_div_scalar_(bias_correction2.sqrt());
        let _ = t.denom.g_add_scalar_(self.eps);
        // p += (-step_size * exp_avg) / denom, the order of `addcdiv_(value=-step_size)`.
        let _ = s.neg_lr.fill_(-step_size);
        let _ = t.exp_avg.mul_out(t.grad, &s.neg_lr);
        let _ = param.addcdiv_(t.grad, t.denom);
    }
}
