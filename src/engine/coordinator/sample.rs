//! After each evaluation of a language model on text, a short continuation of a fixed prompt,
//! sampled by replica 0 (every replica holds the same weights) and decoded as the text was
//! encoded (bytes, or its tokenizer).

use std::sync::Arc;

use super::Coordinator;
use crate::data::codec::TextCodec;
use crate::engine::worker::{FromWorker, ToWorker};
use crate::engine::EngineError;
use crate::input::shard::mix_seed;
use crate::record::Change;

/// What each sample continues: the prompt's tokens, the tokens the model sees at once, and
/// how tokens read as text.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub tokens: Arc<Vec<i64>>,
    pub context: usize,
    pub codec: Arc<TextCodec>,
}

impl Coordinator {
    /// Samples `--sample-tokens` tokens continuing the run's prompt, when it has one, and says
    /// them; the draws are seeded by the run's seed and the step, so a run samples the same text.
    pub(super) fn sample_text(&mut self) -> Result<(), EngineError> {
        let count = self.cfg().settings.recipe.sample_tokens;
        let Some(Prompt { tokens: prompt, context, codec }) = self.facts.sample_prompt.clone() else {
            return Ok(());
        };
        if count == 0 || self.exchange.world.as_ref().is_some_and(|w| w.rank != 0) {
            return Ok(());
        }
        let global_step = self.steps.global_step;
        let seed = mix_seed(self.cfg().settings.recipe.seed, global_step as u64) as i64;
        self.pool.broadcast(|i| ToWorker::Sample {
            prompt: Arc::clone(&prompt),
            tokens: if i == 0 { count } else { 0 },
            context,
            seed,
        })?;
        let timeout = self.cfg().step_timeout() * super::SLOW_WORK_FACTOR;
        let sampled = self.pool.gather(timeout)?.into_iter().find_map(|r| match r {
            FromWorker::Sampled { replica: 0, tokens } => Some(tokens),
            _ => None,
        });
        if let Some(sampled) = sampled.filter(|t| !t.is_empty()) {
            let (prompt, text) = (codec.decode(&prompt), codec.decode(&sampled));
            self.emit(Change::Sampled { global_step, prompt, text });
        }
        Ok(())
    }
}
