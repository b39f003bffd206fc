//! Named tensors as a safetensors file, written through the one atomic-write helper so that a
//! full disk surfaces as the plain I/O error it is ("No space left on device") and never
//! leaves a half-written file.

use std::borrow::Cow;
use std::path::Path;

use safetensors::tensor::{Dtype, View};
use tch::{Kind, Tensor};

use crate::atomic;

/// One tensor's bytes, copied to the host.
struct HostTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &HostTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
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

fn to_host(t: &Tensor) -> std::io::Result<HostTensor> {
    let t = t.to_device(tch::Device::Cpu).contiguous();
    let kind = t.kind();
    let numel = t.numel();
    let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
    t.f_copy_data_u8(&mut bytes, numel).map_err(std::io::Error::other)?;
    let shape = t.size().iter().map(|&d| d as usize).collect();
    Ok(HostTensor { dtype: dtype(kind)?, shape, bytes })
}

/// Writes `tensors` to `path` as safetensors, atomically.
pub fn write(tensors: &[(String, Tensor)], path: &Path) -> std::io::Result<()> {
    let host: Vec<(String, HostTensor)> =
        tensors.iter().map(|(n, t)| Ok((n.clone(), to_host(t)?))).collect::<std::io::Result<_>>()?;
    let bytes = safetensors::serialize(host.iter().map(|(n, t)| (n.as_str(), t)), &None)
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    atomic::write_bytes(path, &bytes)
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
}
