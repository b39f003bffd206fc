//! Mixed precision (`amp_shim.cpp`): an [`Autocast`] scope on the calling thread, as
//! `with torch.autocast(device_type, dtype):` opens one, and the process-wide TF32 switch for
//! float32 matrix products and convolutions on CUDA.

use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr::NonNull;

use tch::{Device, Kind};

use super::{call, non_null, C10dError};

#[repr(C)]
struct RawAutocast {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_autocast_enter(cuda: i32, half: i32, err: *mut *mut c_char) -> *mut RawAutocast;
    fn dpt_autocast_leave(scope: *mut RawAutocast);
    fn dpt_autocast_state(cuda: i32, dtype: *mut i32) -> i32;
    fn dpt_set_tf32(on: i32, err: *mut *mut c_char) -> i32;
    fn dpt_tf32_state(cudnn: i32) -> i32;
}

/// Autocast on this thread for one device type while it lives (on the thread that opened it:
/// the type is neither `Send` nor `Sync`). Matrix products and convolutions run in its format,
/// the operations autocast keeps in float32 (softmax, the losses, norms) stay there; the cast
/// copies of the weights are cached until the outermost scope ends, as in PyTorch.
pub struct Autocast {
    scope: NonNull<RawAutocast>,
    _thread_bound: PhantomData<*const ()>,
}

impl Autocast {
    /// Opens a scope for `device`'s type computing in `kind` (`BFloat16` or `Half`; both on
    /// CUDA and on the CPU).
    pub fn enter(device: Device, kind: Kind) -> Result<Autocast, C10dError> {
        let half = match kind {
            Kind::Half => 1,
            Kind::BFloat16 => 0,
            other => {
                return Err(C10dError(format!("autocast computes in bfloat16 or float16, not {other:?}")))
            }
        };
        let cuda = i32::from(matches!(device, Device::Cuda(_)));
        // SAFETY: plain value arguments; the shim returns an owned scope or an error.
        let raw = call(|err| unsafe { dpt_autocast_enter(cuda, half, err) })?;
        Ok(Autocast { scope: non_null(raw, "entering autocast")?, _thread_bound: PhantomData })
    }

    /// Whether autocast is on for `device`'s type on this thread, and in which format.
    pub fn active(device: Device) -> Option<Kind> {
        let mut dtype = -1;
        // SAFETY: `dtype` is valid for one write; the call reads thread-local state only.
        let on = unsafe { dpt_autocast_state(i32::from(matches!(device, Device::Cuda(_))), &mut dtype) };
        match (on, dtype) {
            (0, _) => None,
            (_, 1) => Some(Kind::Half),
            (_, 0) => Some(Kind::BFloat16),
            _ => Some(Kind::Float),
        }
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // SAFETY: the scope was entered on this thread (the type cannot leave it), left once.
        unsafe { dpt_autocast_leave(self.scope.as_ptr()) }
    }
}

/// Lets cuBLAS and cuDNN use TF32 for float32 on GPUs that have it (`on`, as
/// `torch.backends.cuda.matmul.allow_tf32 = True` with cuDNN's) or keeps both in IEEE float32.
/// Process-wide; the CPU's matrix products are not affected.
pub fn set_tf32(on: bool) -> Result<(), C10dError> {
    // SAFETY: a plain value argument.
    call(|err| unsafe { dpt_set_tf32(i32::from(on), err) }).map(drop)
}

/// Whether float32 matrix products (cuBLAS) and convolutions (cuDNN) may use TF32 now.
pub fn tf32_state() -> (bool, bool) {
    // SAFETY: plain value arguments; reads libtorch's global context.
    unsafe { (dpt_tf32_state(0) != 0, dpt_tf32_state(1) != 0) }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::{set_tf32, tf32_state, Autocast};

    #[test]
    fn a_scope_casts_matrix_products_and_nests_as_torch_autocast() {
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        assert_eq!(Autocast::active(Device::Cpu), None);
        {
            let _outer = Autocast::enter(Device::Cpu, Kind::BFloat16).expect("enter");
            assert_eq!(a.mm(&a).kind(), Kind::BFloat16, "mm runs in bfloat16");
            assert_eq!(a.log_softmax(-1, None::<Kind>).kind(), Kind::Float, "log_softmax stays in f32");
            {
                let _inner = Autocast::enter(Device::Cpu, Kind::Half).expect("enter");
                assert_eq!(a.mm(&a).kind(), Kind::Half);
            }
            assert_eq!(
                Autocast::active(Device::Cpu),
                Some(Kind::BFloat16),
                "the outer scope's format is back"
            );
            assert_eq!(Autocast::active(Device::Cuda(0)), None, "per device type");
        }
        assert_eq!(Autocast::active(Device::Cpu), None);
        assert_eq!(a.mm(&a).kind(), Kind::Float);
        assert!(Autocast::enter(Device::Cpu, Kind::Float).is_err());
    }

    #[test]
    fn tf32_is_switched_for_matrix_products() {
        set_tf32(false).expect("off");
        assert_eq!(tf32_state(), (false, false));
        set_tf32(true).expect("on");
        assert_eq!(tf32_state(), (true, true));
    }
}
