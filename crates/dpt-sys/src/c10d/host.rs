//! Host memory for batches (`host_shim.cpp`): a new byte tensor, page-locked for a GPU, whose
//! bytes a loader fills in place, so that a batch reaches the GPU's copy without being copied
//! on the host first.

use std::ffi::c_char;

use tch::Tensor;

use super::{call, C10dError, CTensor};

extern "C" {
    fn dpt_empty_bytes(sizes: *const i64, n: usize, pinned: i32, err: *mut *mut c_char) -> *mut CTensor;
}

fn empty_bytes(shape: &[i64], pinned: bool) -> Result<Tensor, C10dError> {
    // SAFETY: `shape` is valid for `shape.len()` reads; the shim returns a new tensor or an error.
    let p = call(|err| unsafe { dpt_empty_bytes(shape.as_ptr(), shape.len(), i32::from(pinned), err) })?;
    if p.is_null() {
        return Err(C10dError("libtorch returned no tensor".into()));
    }
    // SAFETY: a non-null pointer from the shim is a heap tensor we now own.
    Ok(unsafe { Tensor::from_ptr(p) })
}

/// A new `uint8` tensor of `shape`, its bytes (row-major, uninitialized until `fill` writes
/// them) lent to `fill` before anything else can see it. With `pinned`, page-locked (libtorch's
/// caching host allocator); where that is refused (no GPU, no driver), ordinary memory.
pub fn filled_bytes<R>(
    shape: &[i64],
    pinned: bool,
    fill: impl FnOnce(&mut [u8]) -> R,
) -> Result<(Tensor, R), C10dError> {
    let tensor = match pinned {
        true => empty_bytes(shape, true).or_else(|_| empty_bytes(shape, false))?,
        false => empty_bytes(shape, false)?,
    };
    let len = tensor.numel();
    let bytes: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: the tensor was made above, contiguous uint8 on the host with `len` bytes; no
        // other handle on its storage exists until it is returned, after `fill` is done. The
        // bytes are uninitialized memory of a plain integer type: every bit pattern is valid.
        unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr().cast::<u8>(), len) }
    };
    let r = fill(bytes);
    Ok((tensor, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_written_are_the_tensor_s_and_pinning_falls_back_without_a_gpu() {
        for pinned in [false, true] {
            let (t, n) = filled_bytes(&[2, 3], pinned, |b| {
                b.iter_mut().enumerate().for_each(|(i, v)| *v = i as u8 * 10);
                b.len()
            })
            .unwrap();
            assert_eq!(n, 6);
            assert_eq!(t.size(), [2, 3]);
            assert_eq!(t.kind(), tch::Kind::Uint8);
            assert_eq!(Vec::<u8>::try_from(t.reshape([-1])).unwrap(), [0, 10, 20, 30, 40, 50]);
        }
        let (empty, _) = filled_bytes(&[0, 4], true, |b| assert!(b.is_empty())).unwrap();
        assert_eq!(empty.numel(), 0);
    }
}
