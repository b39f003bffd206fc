//! The FLOPs a thread's operators do (`flops_shim.cpp`), for model FLOP utilisation: while a
//! [`FlopCount`] lives, every operator libtorch dispatches on this thread (from tch, or from a
//! TorchScript module's forward) adds its floating-point operations, counted as PyTorch's
//! `torch.utils.flop_counter.FlopCounterMode` counts them: 2 per multiply-add of a matrix
//! product (`mm`, `addmm`, `bmm`, `baddbmm`), a convolution or a scaled-dot-product attention;
//! bias adds and elementwise operators are free, and an operator counted hides the ones it
//! calls (a linear layer is its `addmm`, once).
//!
//! Only the thread's own operators count: a backward pass on the CPU runs on the calling thread
//! and counts its matrix products, but not the `convolution_backward` of a convolution; a CUDA
//! backward runs on autograd's device thread and counts nothing. Count a forward pass.

use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::{call, non_null, C10dError};

#[repr(C)]
struct RawFlops {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_flops_open(err: *mut *mut c_char) -> *mut RawFlops;
    fn dpt_flops_total(counter: *mut RawFlops) -> f64;
    fn dpt_flops_close(counter: *mut RawFlops);
}

/// A FLOP counter of the thread that started it, counting until dropped (on that thread: the
/// type is neither `Send` nor `Sync`). Counters on one thread nest: each counts every operator
/// run while it lives, whatever else is open, and they may be dropped in any order.
pub struct FlopCount {
    counter: NonNull<RawFlops>,
    _thread_bound: PhantomData<*const ()>,
}

impl FlopCount {
    /// Starts counting the FLOPs of this thread's operators from now on.
    pub fn start() -> Result<FlopCount, C10dError> {
        // SAFETY: no arguments; the shim returns an owned counter or an error.
        let raw = call(|err| unsafe { dpt_flops_open(err) })?;
        Ok(FlopCount { counter: non_null(raw, "opening a FLOP counter")?, _thread_bound: PhantomData })
    }

    /// The FLOPs counted since [`FlopCount::start`].
    pub fn total(&self) -> f64 {
        // SAFETY: a live counter of this thread's (the type cannot leave it); only its own
        // thread's callback writes it, and that thread is here now.
        unsafe { dpt_flops_total(self.counter.as_ptr()) }
    }
}

impl Drop for FlopCount {
    fn drop(&mut self) {
        // SAFETY: the counter opened on this thread (the type cannot leave it), closed once.
        unsafe { dpt_flops_close(self.counter.as_ptr()) }
    }
}
