//! An exponential moving average of the weights, as timm's `ModelEmaV2` keeps it: a copy of the
//! model's parameters and buffers made at the start, updated after every optimizer step as
//! `ema = decay · ema + (1 − decay) · model` (the same two operations, in float32), evaluated and
//! saved beside the raw weights. It lives on replica 0's device and allocates nothing per step.

use tch::{Kind, Tensor};

/// The averaged parameters and buffers (flat, laid out as the replicas').
pub struct Ema {
    pub decay: f64,
    pub params: Tensor,
    pub buffers: Tensor,
    /// `1 − decay` as a 0-dim tensor on the device.
    weight: Tensor,
}

impl Ema {
    /// Starts from copies of `params` and `buffers` (replica 0's).
    pub fn new(decay: f64, params: &Tensor, buffers: &Tensor) -> Ema {
        let _guard = tch::no_grad_guard();
        let weight = Tensor::from(1.0 - decay).to_kind(Kind::Float).to_device(params.device());
        Ema { decay, params: params.detach().copy(), buffers: buffers.detach().copy(), weight }
    }

    /// Folds the model's current tensors in.
    pub fn update(&mut self, params: &Tensor, buffers: &Tensor) {
        let _guard = tch::no_grad_guard();
        for (e, m) in [(&mut self.params, params), (&mut self.buffers, buffers)] {
            if e.numel() > 0 {
                let _ = e.g_mul_scalar_(self.decay);
                let _ = e.addcmul_(m, &self.weight);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_moves_towards_the_model_by_one_minus_decay() {
        let p = Tensor::from_slice(&[0.0f32, 10.0]);
        let b = Tensor::from_slice(&[1.0f32]);
        let mut ema = Ema::new(0.9, &p, &b);
        ema.update(&Tensor::from_slice(&[10.0f32, 10.0]), &Tensor::from_slice(&[2.0f32]));
        assert_eq!(Vec::<f32>::try_from(&ema.params).unwrap(), vec![1.0, 10.0]);
        let bufs = Vec::<f32>::try_from(&ema.buffers).unwrap();
        assert!((bufs[0] - 1.1).abs() < 1e-6, "{bufs:?}");
    }
}
