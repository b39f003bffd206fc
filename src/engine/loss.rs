//! The training loss as the workers sum it over a batch, whatever the task: class labels,
//! token targets, or the model's own loss.

use tch::{Kind, Reduction, Tensor};

use crate::model::{Forward, ForwardError, LossKind, Network, Task};

/// How a worker turns a batch into its summed loss.
#[derive(Debug, Clone, Copy)]
pub struct Objective {
    pub task: Task,
    pub kind: LossKind,
}

/// A batch's summed loss and, for class labels, its correct predictions.
pub struct Scored {
    pub loss: Tensor,
    pub outputs: Option<Tensor>,
}

impl Objective {
    /// The loss of `net` on `x` against `y` summed over the batch's items (samples, or token
    /// windows), so that the coordinator's division by the global batch gives the mean over
    /// the whole batch as one process would: class labels summed; token targets `[n, T]`
    /// summed over the tokens and divided by `T` (every window has `T` tokens, so weighting by
    /// items is weighting by tokens); a model's own loss (its mean over its `n` items) times
    /// `n`. `smoothing` as `F.cross_entropy(label_smoothing=)`.
    pub fn score(
        &self,
        net: &dyn Network,
        (params, buffers): (&[Tensor], &[Tensor]),
        (x, y): (&Tensor, &Tensor),
        ctx: &Forward,
        smoothing: f64,
    ) -> Result<Scored, ForwardError> {
        let n = x.size().first().copied().unwrap_or(0);
        match self.task {
            Task::Classify => {
                let out = net.forward(params, buffers, x, ctx)?;
                Ok(Scored { loss: summed_loss(self.kind, &out, y, smoothing), outputs: Some(out) })
            }
            Task::Tokens => {
                let out = net.forward(params, buffers, x, ctx)?;
                let (vocab, t) =
                    (out.size().last().copied().unwrap_or(1), y.size().last().copied().unwrap_or(1));
                let flat = out.reshape([-1, vocab]);
                let loss = summed_loss(self.kind, &flat, &y.reshape([-1]), smoothing) / t as f64;
                Ok(Scored { loss, outputs: None })
            }
            Task::ModelLoss => Ok(Scored { loss: net.forward_loss(x, y, ctx)? * n as f64, outputs: None }),
        }
    }
}

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
