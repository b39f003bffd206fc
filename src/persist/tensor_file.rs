//! Named tensors as a safetensors file, written through the one atomic-write helper so that a
//! full disk surfaces as the plain I/O error it is ("No space left on device") and never
//! leaves a half-written file.
//!
//! The file is streamed: each tensor is copied to the host when its turn to be written comes,
//! and dropped once written, so a save holds at most one tensor's bytes beside the tensors it
//! was given (which may be views of the training buffers, on any device). A save of the whole
//! optimizer state costs its largest tensor, not a second and third copy of the state.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;

use safetensors::tensor::{Dtype, View};
use tch::{Kind, Tensor};

use crate::atomic;

/// One tensor to write: its type and shape read up front (the header needs them), its bytes
/// copied to the host only when the writer asks for them.
struct Streamed<'a> {
    tensor: &'a Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
    /// The first failure of a copy to the host; the writer's `data` cannot return one.
    failed: &'a RefCell<Option<std::io::Error>>,
}

impl View for &Streamed<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        match host_bytes(self.tensor, self.len) {
            Ok(bytes) => Cow::Owned(bytes),
            Err(e) => {
                self.failed.borrow_mut().get_or_insert(e);
                Cow::Owned(vec![0; self.len])
            }
        }
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

fn dtype(kind: Kind) -> std::io::Result<Dtype> {
    Ok(match kind {
        Kind::Bool => Dtype::BOOL,
        Kind::Uint8 => Dtype::U8,
        Kind::Int8 => Dtype::I8,
        Kind::Int16 => Dtype::I16,
        Kind::Int => Dtype::I32,
        Kind::Int64 => Dtype::I64,
        Kind::Half => Dtype::F16,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Float => Dtype::F32,
        Kind::Double => Dtype::F64,
        other => return Err(std::io::Error::other(format!("no safetensors type for {other:?}"))),
    })
}

/// `t`'s `len` bytes in row-major order, copied to the host.
fn host_bytes(t: &Tensor, len: usize) -> std::io::Result<Vec<u8>> {
    let _guard = tch::no_grad_guard();
    let t = t.to_device(tch::Device::Cpu).contiguous();
    let mut bytes = vec![0u8; len];
    t.f_copy_data_u8(&mut bytes, t.numel()).map_err(std::io::Error::other)?;
    Ok(bytes)
}

/// Writes `tensors` to `path` as safetensors, atomically, one tensor's bytes at a time.
pub fn write(tensors: &[(String, Tensor)], path: &Path) -> std::io::Result<()> {
    let failed = RefCell::new(None);
    let streamed: Vec<(&str, Streamed)> = tensors
        .iter()
        .map(|(name, t)| {
            let kind = t.kind();
            let streamed = Streamed {
                tensor: t,
                dtype: dtype(kind)?,
                shape: t.size().iter().map(|&d| d as usize).collect(),
                len: t.numel() * kind.elt_size_in_bytes(),
                failed: &failed,
            };
            Ok((name.as_str(), streamed))
        })
        .collect::<std::io::Result<_>>()?;
    atomic::write_with(path, |tmp| {
        safetensors::tensor::serialize_to_file(streamed.iter().map(|(n, t)| (*n, t)), &None, tmp).map_err(
            |e| match e {
                safetensors::SafeTensorError::IoError(io) => io,
                other => std::io::Error::other(format!("{other:?}")),
            },
        )?;
        // A copy that failed wrote zeros in its place: the file is refused, not renamed.
        failed.take().map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_tch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2]);
        let b = Tensor::from_slice(&[7i64]);
        write(&[("a".into(), a.shallow_clone()), ("b".into(), b.shallow_clone())], &path).unwrap();
        let back = Tensor::read_safetensors(&path).unwrap();
        let get = |n: &str| &back.iter().find(|(k, _)| k == n).unwrap().1;
        assert!(get("a").equal(&a) && get("b").equal(&b));
    }

    #[test]
    fn views_are_written_as_their_own_values() {
        // A transposed view and a narrowed one of a flat buffer, written without copies first.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.safetensors");
        let flat = Tensor::arange(12, (Kind::Float, tch::Device::Cpu));
        let t = flat.narrow(0, 0, 6).view([2, 3]).tr();
        let n = flat.narrow(0, 6, 6);
        write(&[("t".into(), t.shallow_clone()), ("n".into(), n.shallow_clone())], &path).unwrap();
        let back = Tensor::read_safetensors(&path).unwrap();
        let get = |k: &str| &back.iter().find(|(name, _)| name == k).unwrap().1;
        assert_eq!(get("t").size(), vec![3, 2]);
        assert!(get("t").equal(&t.contiguous()) && get("n").equal(&n));
    }

    #[test]
    fn a_tensor_of_no_safetensors_type_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.safetensors");
        let c = Tensor::zeros([2], (Kind::ComplexFloat, tch::Device::Cpu));
        let err = write(&[("c".into(), c)], &path).unwrap_err();
        assert!(err.to_string().contains("no safetensors type"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no file, no temporary");
    }
}
