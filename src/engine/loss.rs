//! The training loss as the workers sum it over a batch.

use tch::{Kind, Reduction, Tensor};

use crate::model::LossKind;

/// The loss summed over the batch; `smoothing` as `F.cross_entropy(label_smoothing=)` (for a
/// model that outputs log-probabilities, the same mix of the target's term and the mean over
/// the classes).
pub fn summed_loss(kind: LossKind, out: &Tensor, y: &Tensor, smoothing: f64) -> Tensor {
    match kind {
        LossKind::CrossEntropy => out.cross_entropy_loss::<Tensor>(y, None, Reduction::Sum, -100, smoothing),
        LossKind::Nll if smoothing == 0.0 => out.g_nll_loss::<Tensor>(y, None, Reduction::Sum, -100),
        LossKind::Nll => {
            let nll = out.g_nll_loss::<Tensor>(y, None, Reduction::Sum, -100);
            let uniform = out.mean_dim(-1, false, Kind::Float).sum(Kind::Float);
            nll * (1.0 - smoothing) - uniform * smoothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_log_probabilities_equals_smoothing_logits() {
        let logits = Tensor::from_slice(&[2.0f32, -1.0, 0.5, 0.1, 0.3, -2.0]).view([2, 3]);
        let y = Tensor::from_slice(&[0i64, 2]);
        let log_p = logits.log_softmax(-1, Kind::Float);
        for eps in [0.0, 0.1, 0.4] {
            let ce = summed_loss(LossKind::CrossEntropy, &logits, &y, eps).double_value(&[]);
            let nll = summed_loss(LossKind::Nll, &log_p, &y, eps).double_value(&[]);
            assert!((ce - nll).abs() < 1e-5, "eps {eps}: {ce} vs {nll}");
        }
    }
}
