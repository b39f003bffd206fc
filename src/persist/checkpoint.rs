//! Checkpoints: everything needed to continue a run exactly where it stopped, in one
//! safetensors file written atomically (temporary file, fsync, rename, fsync of the folder).
//!
//! Tensors: `param.<name>`, `buffer.<name>`, the optimizer's state as `<slot>.<name>` (slots
//! named by [`OptimizerKind::slots`]: `momentum`; `exp_avg`, `exp_avg_sq`), the weights' moving
//! average as `ema_param.<name>` and `ema_buffer.<name>` (with `--ema`), and `__state__`, the
//! [`CheckpointState`] as UTF-8 JSON bytes. The random streams need no state of their own: the
//! shuffle of epoch `e` and the dropout masks of step `s` on replica `r` are derived from the
//! run's seed and `(e)` or `(s, r)`, so the seed and the position restore them.

use std::path::{Path, PathBuf};

use crate::engine::flat::aligned_offsets;
use tch::{Kind, Tensor};
use thiserror::Error;

use crate::model::ModelKind;
use dpt_core::optim::OptimizerKind;

pub use super::checkpoint_state::CheckpointState;

pub use dpt_core::run_dir::CHECKPOINT_FILE;
const STATE_KEY: &str = "__state__";

/// A checkpoint that cannot be written or used.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("cannot read checkpoint {path}: {message} (pass a checkpoint.safetensors file or a run directory holding one)")]
    Read {
        path: PathBuf,
        message: String,
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("cannot write checkpoint {path}; the previous checkpoint is intact")]
    Write {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("checkpoint {path} belongs to model '{found}', not '{expected}'; drop --model or pass a checkpoint of {expected}")]
    OtherModel { path: PathBuf, found: ModelKind, expected: ModelKind },
    #[error("checkpoint {path} does not fit the model: {message}")]
    Mismatch { path: PathBuf, message: String },
    #[error("checkpoint {path} not written: the parameters are not finite; the previous checkpoint is intact")]
    NotFinite { path: PathBuf },
}

/// Tensors by name.
pub type NamedTensors = Vec<(String, Tensor)>;

/// A checkpoint in memory (tensors on the CPU).
pub struct Checkpoint {
    pub state: CheckpointState,
    pub params: Vec<(String, Tensor)>,
    /// Each optimizer slot's tensors by name.
    pub optimizer: Vec<(String, Vec<(String, Tensor)>)>,
    pub buffers: Vec<(String, Tensor)>,
    /// The weights' moving average (`--ema`): parameters and buffers by name.
    pub ema: Option<(NamedTensors, NamedTensors)>,
}

/// Every slot name any optimizer uses.
fn known_slot(name: &str) -> bool {
    [OptimizerKind::Sgd, OptimizerKind::Adam].iter().any(|k| k.slots().contains(&name))
}

/// `path` itself, or the checkpoint inside it when it is a directory.
pub fn checkpoint_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(CHECKPOINT_FILE)
    } else {
        path.to_owned()
    }
}

impl Checkpoint {
    /// Writes the checkpoint to `path` atomically.
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        let err = |cause: std::io::Error| CheckpointError::Write { path: path.to_owned(), cause };
        let json = serde_json::to_vec(&self.state).map_err(|e| err(std::io::Error::other(e)))?;
        let mut tensors: Vec<(String, Tensor)> = Vec::new();
        let none = Vec::new();
        let (ema_params, ema_buffers) = self.ema.as_ref().map_or((&none, &none), |(p, b)| (p, b));
        let lists = [
            ("param", &self.params),
            ("buffer", &self.buffers),
            ("ema_param", ema_params),
            ("ema_buffer", ema_buffers),
        ];
        let slots = self.optimizer.iter().map(|(slot, list)| (slot.as_str(), list));
        for (prefix, list) in lists.into_iter().chain(slots) {
            tensors.extend(list.iter().map(|(n, t)| (format!("{prefix}.{n}"), t.shallow_clone())));
        }
        tensors.push((STATE_KEY.to_owned(), Tensor::from_slice(&json)));
        super::tensor_file::write(&tensors, path).map_err(err)
    }

    /// Reads a checkpoint file, or the one in a run directory.
    pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let file = checkpoint_path(path);
        let err = |message: String| CheckpointError::Read { path: file.clone(), message, cause: None };
        let failed = |message: &str, cause: Box<dyn std::error::Error + Send + Sync>| CheckpointError::Read {
            path: file.clone(),
            message: message.to_owned(),
            cause: Some(cause),
        };
        if !file.is_file() {
            return Err(err("no such file".into()));
        }
        let tensors =
            Tensor::read_safetensors(&file).map_err(|e| failed("not a safetensors file", e.into()))?;
        let mut state = None;
        let (mut params, mut buffers) = (Vec::new(), Vec::new());
        let (mut ema_params, mut ema_buffers) = (Vec::new(), Vec::new());
        let mut optimizer: Vec<(String, Vec<(String, Tensor)>)> = Vec::new();
        for (name, t) in tensors {
            if name == STATE_KEY {
                let bytes: Vec<u8> = Vec::try_from(&t.to_kind(Kind::Uint8))
                    .map_err(|e: tch::TchError| failed("unreadable run state", e.into()))?;
                state = Some(CheckpointState::from_json(&bytes).map_err(&err)?);
            } else if let Some(n) = name.strip_prefix("param.") {
                params.push((n.to_owned(), t));
            } else if let Some(n) = name.strip_prefix("ema_param.") {
                ema_params.push((n.to_owned(), t));
            } else if let Some(n) = name.strip_prefix("ema_buffer.") {
                ema_buffers.push((n.to_owned(), t));
            } else if let Some((slot, n)) = name.split_once('.').filter(|(slot, _)| known_slot(slot)) {
                match optimizer.iter_mut().find(|(s, _)| s == slot) {
                    Some((_, list)) => list.push((n.to_owned(), t)),
                    None => optimizer.push((slot.to_owned(), vec![(n.to_owned(), t)])),
                }
            } else if let Some(n) = name.strip_prefix("buffer.") {
                buffers.push((n.to_owned(), t));
            } else {
                return Err(err(format!("unexpected tensor '{name}'")));
            }
        }
        let state = state.ok_or_else(|| err("no run state in the file (is it a weights file?)".into()))?;
        let ema = (!ema_params.is_empty()).then_some((ema_params, ema_buffers));
        Ok(Checkpoint { state, params, optimizer, buffers, ema })
    }

    /// The tensors named `names` with `shapes`, in that order, flattened into one CPU tensor.
    pub fn flat(
        list: &[(String, Tensor)],
        specs: &[crate::model::TensorSpec],
        path: &Path,
    ) -> Result<Tensor, CheckpointError> {
        let mismatch = |message: String| CheckpointError::Mismatch { path: path.to_owned(), message };
        let mut parts = Vec::with_capacity(specs.len());
        for spec in specs {
            let (_, t) = list
                .iter()
                .find(|(n, _)| *n == spec.name)
                .ok_or_else(|| mismatch(format!("tensor '{}' is missing", spec.name)))?;
            if t.size() != spec.shape {
                return Err(mismatch(format!(
                    "'{}' has shape {:?}, expected {:?}",
                    spec.name,
                    t.size(),
                    spec.shape
                )));
            }
            parts.push(t.to_kind(Kind::Float).reshape([-1]));
        }
        if list.len() != specs.len() {
            return Err(mismatch(format!("{} tensors, the model has {}", list.len(), specs.len())));
        }
        Ok(if parts.is_empty() {
            Tensor::zeros([0], (Kind::Float, tch::Device::Cpu))
        } else {
            joined(&parts)
        })
    }
}

/// `parts` (flat, f32) in one tensor of logical order: where they lie in one buffer each at
/// its aligned offset ([`crate::engine::flat::aligned_offsets`], the training buffer's layout:
/// a rewind point's tensors, views of the one host copy of that buffer), that memory itself,
/// pads included; else a copy of them back to back.
fn joined(parts: &[Tensor]) -> Tensor {
    let (offsets, total) = aligned_offsets(parts.iter().map(|t| t.numel() as i64));
    let filled: Vec<(i64, &Tensor)> = offsets.into_iter().zip(parts).filter(|(_, t)| t.numel() > 0).collect();
    let in_place = filled.iter().all(|(_, t)| t.is_contiguous() && t.kind() == Kind::Float)
        && filled.iter().all(|(at, t)| {
            t.data_ptr() as usize == filled[0].1.data_ptr() as usize + 4 * (*at - filled[0].0) as usize
        });
    match filled.first() {
        // The first tensor with values starts at offset 0; a view past the end of its memory is
        // refused (out of its storage's bounds), and the parts are copied.
        Some((0, first)) if in_place => {
            first.f_as_strided([total], [1], None::<i64>).unwrap_or_else(|_| Tensor::cat(parts, 0))
        }
        _ => Tensor::cat(parts, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::joined;
    use tch::{Kind, Tensor};

    #[test]
    fn views_at_their_aligned_offsets_in_one_buffer_join_without_a_copy_and_others_are_copied() {
        let flat = Tensor::arange(192, (Kind::Float, tch::Device::Cpu));
        let views = [flat.narrow(0, 0, 4), flat.narrow(0, 64, 0), flat.narrow(0, 64, 70)];
        let one = joined(&views);
        assert_eq!(one.data_ptr(), flat.data_ptr(), "the buffer itself");
        assert!(one.equal(&flat), "pads included: the training buffer's layout");
        let apart = [flat.narrow(0, 0, 3), flat.narrow(0, 4, 6)];
        let copied = joined(&apart);
        assert_ne!(copied.data_ptr(), flat.data_ptr());
        assert_eq!(Vec::<f32>::try_from(&copied).unwrap(), [0., 1., 2., 4., 5., 6., 7., 8., 9.]);
        let (a, b) = (Tensor::ones([3], (Kind::Float, tch::Device::Cpu)), Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)));
        let two = joined(&[a.shallow_clone(), b.shallow_clone()]);
        assert!(two.equal(&Tensor::cat(&[a, b], 0)), "two buffers: a copy, whatever their addresses");
    }
}
