//! A language model's continuation of a prompt, token by token, as nanoGPT's `generate` does:
//! the context cropped to the block, the last position's logits over the temperature, the top
//! k kept, one token drawn from their softmax by the replica's own seeded stream. The tokens
//! stay on the device until the sample ends (nanoGPT's `generate` keeps them there too): no
//! read per token.

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
        // The sequence stays on the device until the sample ends: one upload, one read.
        let mut seq = Tensor::from_slice(prompt).view([1, -1]).to_device(self.device);
        for _ in 0..tokens {
            let len = seq.size()[1];
            let seen = len.min(context.max(1) as i64);
            let x = seq.narrow(1, len - seen, seen);
            // A model that takes targets gets its inputs as targets: only its logits are read.
            let logits = self.net.forward_logits(&self.params.views, &self.buffers.views, &x, &x, &ctx)?;
            if logits.dim() != 3 {
                return Ok(Vec::new());
            }
            let last = logits.get(0).get(-1).to_kind(Kind::Float) / TEMPERATURE;
            let k = TOP_K.min(last.size()[0]);
            let (top, index) = last.f_topk(k, -1, true, true)?;
            let pick = top.softmax(-1, Kind::Float).f_multinomial(1, false)?;
            let next = index.gather(0, &pick, false).view([1, 1]);
            seq = Tensor::f_cat(&[&seq, &next], 1)?;
        }
        let new = seq.get(0).narrow(0, prompt.len() as i64, tokens as i64).to_device(tch::Device::Cpu);
        Ok(Vec::<i64>::try_from(&new)?)
    }
}
