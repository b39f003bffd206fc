//! The global L2 norm of the mean gradient, and `clip_grad_norm_`'s scaling by it:
//! `min(1, max_norm / (norm + 1e-6))`, as PyTorch's `torch.nn.utils.clip_grad_norm_` computes
//! it. Everything stays on the devices (no host sync).

use tch::Tensor;

use crate::dist::World;
use crate::engine::EngineError;

/// How a step's norm is taken: the gradients (the mean over the step's batch) are clipped to
/// `max_norm` when set, and the norm is given on `device` (replica 0's).
pub(super) struct GradNorm {
    pub(super) max_norm: Option<f64>,
    pub(super) device: tch::Device,
}

impl GradNorm {
    /// Every replica's gradient holds the whole sum: the norm of the buffers `holders` name
    /// (each once; they hold the same sum), each of them clipped.
    pub(super) fn of_holders(&self, grads: &mut [Tensor], holders: &[usize]) -> Tensor {
        let _guard = tch::no_grad_guard();
        let mut first = None;
        for (i, &h) in holders.iter().enumerate() {
            if holders[..i].contains(&h) {
                continue;
            }
            let norm = grads[h].norm();
            self.clip(&mut grads[h], &norm);
            first.get_or_insert(norm);
        }
        first.unwrap_or_else(|| Tensor::zeros([], (tch::Kind::Float, self.device)))
    }

    /// Each replica's gradient holds its shard of the sum (`--zero 2`): the squares of every
    /// shard's norm summed on `device`, over `world`'s ranks too, and every shard clipped.
    pub(super) fn of_shards(&self, grads: &mut [Tensor], world: Option<&World>) -> Result<Tensor, EngineError> {
        let _guard = tch::no_grad_guard();
        let mut squares = Tensor::zeros([1], (tch::Kind::Float, self.device));
        for g in grads.iter() {
            let n = g.norm().to_device(self.device);
            let _ = squares.g_add_(&(&n * &n));
        }
        if let Some(w) = world.filter(|w| w.size > 1) {
            w.allreduce_in_place(&mut squares, dpt_sys::c10d::ReduceOp::Sum)?;
        }
        let norm = squares.sqrt().reshape([]);
        for g in grads.iter_mut() {
            self.clip(g, &norm);
        }
        Ok(norm)
    }

    fn clip(&self, g: &mut Tensor, norm: &Tensor) {
        if let Some(max) = self.max_norm {
            // A norm that is not a number makes the gradient's values NaN whatever the factor,
            // and the step is skipped (loss scaling) or ruins the weights as PyTorch's would;
            // a factor of 1 then keeps the zeros between tensors (the alignment's pads, which no
            // backward pass writes) zeros for the steps after.
            let coef = ((norm + 1e-6).reciprocal() * max).clamp_max(1.0).nan_to_num(1.0, None::<f64>, None::<f64>);
            let _ = g.g_mul_(&coef.to_device(g.device()));
        }
    }
}
