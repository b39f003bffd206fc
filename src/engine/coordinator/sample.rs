//! After each evaluation of a language model on text, a short continuation of a fixed prompt,
//! sampled by replica 0 (every replica holds the same weights) and decoded as the text was
//! encoded (bytes, or its tokenizer).

use std::sync::Arc;

use super::WorkerPool;
use crate::data::codec::TextCodec;
use crate::engine::worker::{FromWorker, ToWorker};
use crate::engine::EngineError;

/// What each sample continues: the prompt's tokens, the tokens the model sees at once, and
/// how tokens read as text.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub tokens: Arc<Vec<i64>>,
    pub context: usize,
    pub codec: Arc<TextCodec>,
}

/// How a sample is drawn after an evaluation.
pub(super) struct Sampling {
    /// `--sample-tokens` (0: none).
    pub(super) count: usize,
    /// Only the leading process samples (every replica holds the same weights).
    pub(super) leads: bool,
    /// The draws' seed: the run's seed and the step, so a run samples the same text.
    pub(super) seed: i64,
    pub(super) timeout: std::time::Duration,
}

/// Samples `count` tokens continuing `prompt` on replica 0, when the run has a prompt; the
/// prompt and the continuation as text.
pub(super) fn sample_text(
    pool: &WorkerPool,
    prompt: Option<&Prompt>,
    how: &Sampling,
) -> Result<Option<(String, String)>, EngineError> {
    let Some(Prompt { tokens: prompt, context, codec }) = prompt else { return Ok(None) };
    if how.count == 0 || !how.leads {
        return Ok(None);
    }
    pool.broadcast(|i| ToWorker::Sample {
        prompt: Arc::clone(prompt),
        tokens: if i == 0 { how.count } else { 0 },
        context: *context,
        seed: how.seed,
    })?;
    let sampled = pool.gather(how.timeout)?.into_iter().find_map(|r| match r {
        FromWorker::Sampled { replica: 0, tokens } => Some(tokens),
        _ => None,
    });
    Ok(sampled.filter(|t| !t.is_empty()).map(|t| (codec.decode(prompt), codec.decode(&t))))
}
