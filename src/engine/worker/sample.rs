//! A language model's continuation of a prompt, token by token, as nanoGPT's `generate` does:
//! the context cropped to the block, the last position's logits over the temperature, the top
//! k kept, one token drawn from their softmax by the replica's own seeded stream.

use tch::{Kind, Tensor};

use super::{Worker, WorkerError};
use crate::model::Forward;
use dpt_sys::c10d::OwnRng;

/// The logits' divisor: under 1 sharpens the distribution.
pub const TEMPERATURE: f64 = 0.8;
/// Only the most likely this many tokens are drawn from.
pub const TOP_K: i64 = 40;

impl Worker {
    /// `tokens` tokens continuing `prompt`, the model seeing at most `context` tokens at once;
    /// none when the model's first output is not `[1, T, vocab]` logits.
    pub(super) fn sample(
        &mut self,
        prompt: &[i64],
        tokens: usize,
        context: usize,
        seed: i64,
    ) -> Result<Vec<i64>, WorkerError> {
        if tokens == 0 || prompt.is_empty() {
            return Ok(Vec::new());
        }
        let _guard = tch::no_grad_guard();
        let _own = OwnRng::open(seed, self.device)?;
        let ctx = Forward { train: false, masks: &[], precision: self.precision };
        let mut seq = prompt.to_vec();
        for _ in 0..tokens {
            let window = &seq[seq.len().saturating_sub(context.max(1))..];
            let x = Tensor::from_slice(window).view([1, -1]).to_device(self.device);
            // A model that takes targets gets its inputs as targets: only its logits are read.
            let logits = self.net.forward_logits(&self.params.views, &self.buffers.views, &x, &x, &ctx)?;
            if logits.dim() != 3 {
                return Ok(Vec::new());
            }
            let last = logits.get(0).get(-1).to_kind(Kind::Float) / TEMPERATURE;
            let k = TOP_K.min(last.size()[0]);
            let (top, index) = last.f_topk(k, -1, true, true)?;
            let pick = top.softmax(-1, Kind::Float).f_multinomial(1, false)?;
            seq.push(index.gather(0, &pick, false).int64_value(&[0]));
        }
        Ok(seq.split_off(prompt.len()))
    }
}
