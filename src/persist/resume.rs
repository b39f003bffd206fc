//! A run to continue from a checkpoint: its state and tensors, checked against the model and
//! laid out as the engine stores them.

use tch::Tensor;

use super::checkpoint::{Checkpoint, CheckpointError, CheckpointState};
use super::checkpoint_state::Continued;
use crate::model::script::ScriptModel;
use crate::model::ModelKind;

/// A run to continue: the checkpoint's state and its tensors, flattened in the model's order.
pub struct Resume {
    pub state: CheckpointState,
    pub params: Tensor,
    /// Each slot of the optimizer's state, flat in logical order.
    pub optimizer: Vec<(String, Tensor)>,
    pub buffers: Tensor,
    /// The weights' moving average, parameters then buffers (flat, logical order).
    pub ema: Option<(Tensor, Tensor)>,
    /// How the run goes on from the checkpoint (`--resume-lr`, `--skip-batches`).
    pub then: Continuation,
}

/// What changes where a run goes on from a checkpoint or a rewind point: the learning rate from
/// there (the rest of the schedule scaled to it) and the batches of data skipped after it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Continuation {
    pub lr: Option<f64>,
    pub skip: usize,
}

impl std::fmt::Debug for Resume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resume").field("state", &self.state).finish_non_exhaustive()
    }
}

impl Continuation {
    /// Whether it changes anything.
    pub fn is_some(&self) -> bool {
        *self != Continuation::default()
    }
}

impl Resume {
    /// A second handle on the same tensors (shallow: nothing copied), to restore from while the
    /// point itself stays kept.
    pub fn shallow_clone(&self) -> Resume {
        Resume {
            state: self.state.clone(),
            params: self.params.shallow_clone(),
            optimizer: self.optimizer.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(),
            buffers: self.buffers.shallow_clone(),
            ema: self.ema.as_ref().map(|(p, b)| (p.shallow_clone(), b.shallow_clone())),
            then: self.then,
        }
    }

    /// The continuation the checkpoints of this run carry: the one applied now, or the one the
    /// resumed checkpoint already carried.
    pub fn continued(&self) -> Option<Continued> {
        match self.then.is_some() {
            true => Some(Continued {
                global_step: self.state.global_step,
                lr: self.then.lr,
                skip: self.then.skip,
            }),
            false => self.state.continued,
        }
    }

    /// Sets how the run goes on to `asked`, unless the checkpoint was written after the same
    /// continuation had been applied (the same command run again, resuming the run's newer
    /// checkpoint); then nothing is applied again, and the step it was applied at is returned.
    pub fn go_on_as(&mut self, asked: Continuation) -> Option<usize> {
        let again =
            self.state.continued.filter(|c| asked.is_some() && c.lr == asked.lr && c.skip == asked.skip);
        self.then = if again.is_some() { Continuation::default() } else { asked };
        again.map(|c| c.global_step)
    }

    /// Checks `ckpt` against `model` and lays its tensors out as the engine stores them.
    pub fn new(
        ckpt: Checkpoint,
        model: ModelKind,
        script: Option<&ScriptModel>,
        path: &std::path::Path,
    ) -> Result<Resume, CheckpointError> {
        if ckpt.state.model() != model {
            return Err(CheckpointError::OtherModel {
                path: path.to_owned(),
                found: ckpt.state.model(),
                expected: model,
            });
        }
        let b = crate::model::specs(model, script);
        let mut optimizer = Vec::new();
        for &slot in ckpt.state.settings.optimizer.kind.slots() {
            let list = ckpt.optimizer.iter().find(|(s, _)| s == slot).map_or(&[][..], |(_, l)| l);
            let flat = Checkpoint::flat(list, &b.params, path).map_err(|e| match e {
                CheckpointError::Mismatch { path, message } => CheckpointError::Mismatch {
                    path,
                    message: format!("optimizer state '{slot}': {message}"),
                },
                other => other,
            })?;
            optimizer.push((slot.to_owned(), flat));
        }
        let ema = match &ckpt.ema {
            Some((p, bufs)) => {
                Some((Checkpoint::flat(p, &b.params, path)?, Checkpoint::flat(bufs, &b.buffers, path)?))
            }
            None => None,
        };
        Ok(Resume {
            params: Checkpoint::flat(&ckpt.params, &b.params, path)?,
            optimizer,
            buffers: Checkpoint::flat(&ckpt.buffers, &b.buffers, path)?,
            ema,
            state: ckpt.state,
            then: Continuation::default(),
        })
    }

    /// A resume whose tensors are zeros of the model's sizes, to be filled by a broadcast from
    /// rank 0 (the only rank that reads the checkpoint).
    pub fn awaiting(state: CheckpointState, script: Option<&ScriptModel>) -> Resume {
        let b = crate::model::specs(state.model(), script);
        let zeros = |specs: &[crate::model::TensorSpec]| {
            Tensor::zeros(
                [specs.iter().map(crate::model::TensorSpec::numel).sum::<i64>()],
                (tch::Kind::Float, tch::Device::Cpu),
            )
        };
        let optimizer = state
            .settings
            .optimizer
            .kind
            .slots()
            .iter()
            .map(|s| ((*s).to_owned(), zeros(&b.params)))
            .collect();
        let ema = state.settings.recipe.ema.map(|_| (zeros(&b.params), zeros(&b.buffers)));
        Resume {
            params: zeros(&b.params),
            optimizer,
            buffers: zeros(&b.buffers),
            ema,
            state,
            then: Continuation::default(),
        }
    }
}
