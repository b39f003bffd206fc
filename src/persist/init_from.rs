//! Fine-tuning from other weights: `--init-from FILE` (a safetensors file, or a run directory's
//! `model.safetensors`) loads tensors into the model by name before training starts. Weights
//! only — no optimizer state, no position: the run is a new one. A tensor the file lacks, or
//! holds with another shape (a new classifier head, say), keeps the model's own initial value,
//! and the run says which.

use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};
use thiserror::Error;

use crate::model::TensorSpec;

/// A weights file that cannot be used.
#[derive(Debug, Error)]
#[error("--init-from {path}: {message} (pass a .safetensors file of weights, or a run directory holding model.safetensors)")]
pub struct InitError {
    pub path: PathBuf,
    pub message: String,
}

/// The weights to start from, read.
pub struct InitFrom {
    pub path: PathBuf,
    tensors: Vec<(String, Tensor)>,
}

impl std::fmt::Debug for InitFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitFrom").field("path", &self.path).field("tensors", &self.tensors.len()).finish()
    }
}

/// What loading matched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InitReport {
    pub loaded: usize,
    /// The model's tensors the file did not provide (absent, or of another shape: named so).
    pub missing: Vec<String>,
    /// The file's tensors the model has no place for.
    pub unused: Vec<String>,
}

impl InitFrom {
    /// Reads `path`: a safetensors file, or a directory holding `model.safetensors`.
    pub fn read(path: &Path) -> Result<InitFrom, InitError> {
        let file = if path.is_dir() { path.join(crate::persist::WEIGHTS_FILE) } else { path.to_owned() };
        let err = |message: String| InitError { path: path.to_owned(), message };
        if !file.is_file() {
            return Err(err(format!("{} does not exist", file.display())));
        }
        let tensors =
            Tensor::read_safetensors(&file).map_err(|e| err(format!("not a safetensors file ({e})")))?;
        Ok(InitFrom { path: file, tensors })
    }

    /// Overwrites, in `params` and `buffers` (each the specs' tensors concatenated in logical
    /// order, on the CPU), every tensor the file holds under the same name and shape.
    pub fn apply(
        &self,
        param_specs: &[TensorSpec],
        buffer_specs: &[TensorSpec],
        params: &mut Tensor,
        buffers: &mut Tensor,
    ) -> InitReport {
        let _guard = tch::no_grad_guard();
        let mut report = InitReport::default();
        let mut used = vec![false; self.tensors.len()];
        for (specs, flat) in [(param_specs, params), (buffer_specs, buffers)] {
            let mut offset = 0;
            for spec in specs {
                let n = spec.numel();
                match self.tensors.iter().position(|(name, _)| *name == spec.name) {
                    Some(i) if self.tensors[i].1.size() == spec.shape => {
                        used[i] = true;
                        flat.narrow(0, offset, n)
                            .copy_(&self.tensors[i].1.to_kind(Kind::Float).reshape([-1]));
                        report.loaded += 1;
                    }
                    Some(i) => {
                        used[i] = true;
                        report.missing.push(format!(
                            "{} (shape {:?} in the file, {:?} in the model)",
                            spec.name,
                            self.tensors[i].1.size(),
                            spec.shape
                        ));
                    }
                    None => report.missing.push(spec.name.clone()),
                }
                offset += n;
            }
        }
        report.unused =
            self.tensors.iter().zip(&used).filter(|(_, u)| !**u).map(|((name, _), _)| name.clone()).collect();
        report.unused.sort();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Init;

    fn spec(name: &str, shape: &[i64]) -> TensorSpec {
        TensorSpec { name: name.into(), shape: shape.to_vec(), init: Init::Zeros, frozen: false }
    }

    #[test]
    fn tensors_load_by_name_and_shape_and_the_rest_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("w.safetensors");
        let tensors = [
            ("body.weight", Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2])),
            ("head.weight", Tensor::from_slice(&[9.0f32; 3]).view([3, 1])),
            ("extra", Tensor::from_slice(&[5.0f32])),
        ];
        Tensor::write_safetensors(&tensors, &file).unwrap();
        let init = InitFrom::read(dir.path().join("w.safetensors").as_path()).unwrap();
        let specs = [spec("body.weight", &[2, 2]), spec("head.weight", &[2, 1]), spec("head.bias", &[2])];
        let mut params = Tensor::zeros([8], (Kind::Float, tch::Device::Cpu));
        let mut buffers = Tensor::zeros([0], (Kind::Float, tch::Device::Cpu));
        let r = init.apply(&specs, &[], &mut params, &mut buffers);
        assert_eq!(r.loaded, 1);
        assert_eq!(r.missing, ["head.weight (shape [3, 1] in the file, [2, 1] in the model)", "head.bias"]);
        assert_eq!(r.unused, ["extra"]);
        assert_eq!(Vec::<f32>::try_from(&params).unwrap(), [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
        let e = InitFrom::read(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
