//! Safe Rust handles over the C++ shims (`c10d_shim.cpp`, `c10d_nccl.cpp`, `jit_shim.cpp`) that
//! reach libtorch's c10d — TCPStore and PrefixStore for rendezvous, ProcessGroupGloo and
//! ProcessGroupNCCL for collectives — the single-process NCCL allreduce, CUDA devices and timing
//! events (`cuda.rs`), TorchScript modules (`jit.rs`), gradient hooks (`hooks.rs`,
//! `autograd_shim.cpp`), a thread's own generator (`rng.rs`, `rng_shim.cpp`), a thread's FLOP
//! counter (`flops.rs`, `flops_shim.cpp`), autocast scopes and TF32 (`amp.rs`, `amp_shim.cpp`),
//! the fused optimizer kernels (`optim.rs`, `optim_shim.cpp`), page-locked host memory for
//! batches (`host.rs`, `host_shim.cpp`) and c10's warnings per thread (`warnings.rs`,
//! `warn_shim.cpp`).
//! Every C++ exception is caught in the shim and arrives here as a [`C10dError`].

use std::ffi::{c_char, CStr, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use tch::Tensor;
use thiserror::Error;

pub use crate::identity::CudaIdentity;

pub mod amp;
mod cuda;
pub mod flops;
mod graph;
mod hooks;
pub mod host;
pub mod jit;
pub mod optim;
mod rng;
mod store;
pub mod warnings;

pub use graph::CudaGraph;
pub use hooks::{on_grad, Handled};
pub use rng::OwnRng;
use store::RawStore;
pub use store::Store;

pub use cuda::{
    context_made, cuda_identity, cuda_peak_allocated, cuda_reset_peak, current_stream, nccl_compiled,
    nccl_local_allreduce, nccl_side_join, record_stream, set_cuda_sync_debug, set_thread_device, CudaEvent,
    OwnStream, SideStream, SyncDebug,
};
pub use warnings::{count_syncs_here, cuda_sync_count};

#[repr(C)]
struct RawGroup {
    _private: [u8; 0],
}
#[repr(C)]
struct RawWork {
    _private: [u8; 0],
}
pub(crate) type CTensor = torch_sys::C_tensor;

extern "C" {
    fn dpt_free_string(s: *mut c_char);
    fn dpt_set_c10_log_level(level: i32);
    fn dpt_gloo_group(
        s: *mut RawStore,
        rank: i32,
        size: i32,
        timeout_ms: i64,
        err: *mut *mut c_char,
    ) -> *mut RawGroup;
    fn dpt_nccl_group(
        s: *mut RawStore,
        rank: i32,
        size: i32,
        timeout_ms: i64,
        err: *mut *mut c_char,
    ) -> *mut RawGroup;
    fn dpt_group_free(g: *mut RawGroup);
    fn dpt_allreduce(
        g: *mut RawGroup,
        t: *const *mut CTensor,
        n: usize,
        op: i32,
        err: *mut *mut c_char,
    ) -> *mut RawWork;
    fn dpt_broadcast(
        g: *mut RawGroup,
        t: *const *mut CTensor,
        n: usize,
        root: i32,
        err: *mut *mut c_char,
    ) -> *mut RawWork;
    fn dpt_reduce(
        g: *mut RawGroup,
        t: *const *mut CTensor,
        n: usize,
        root: i32,
        err: *mut *mut c_char,
    ) -> *mut RawWork;
    fn dpt_work_wait(w: *mut RawWork, timeout_ms: i64, err: *mut *mut c_char) -> i32;
    fn dpt_work_free(w: *mut RawWork);
}

/// A failure inside c10d (a C++ exception, its message kept), or bad input to this module.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{0}")]
pub struct C10dError(pub String);

/// Keeps c10d's own log lines (a warning with a backtrace for every failed connection attempt)
/// off stderr, where dpt-tui reports one line; `TORCH_CPP_LOG_LEVEL`, when set, decides as in
/// PyTorch.
pub fn quiet_logs() {
    if std::env::var_os("TORCH_CPP_LOG_LEVEL").is_none() {
        // SAFETY: sets a global integer flag; no other precondition.
        unsafe { dpt_set_c10_log_level(3) }
    }
}

/// Calls `f` with an error slot; a message left there becomes the error.
fn call<T>(f: impl FnOnce(*mut *mut c_char) -> T) -> Result<T, C10dError> {
    let mut err: *mut c_char = std::ptr::null_mut();
    let out = f(&mut err);
    if err.is_null() {
        return Ok(out);
    }
    // SAFETY: the shim stores a NUL-terminated malloc'ed string, ours to free.
    let message = unsafe {
        let m = CStr::from_ptr(err).to_string_lossy().into_owned();
        dpt_free_string(err);
        m
    };
    Err(C10dError(summary(&message)))
}

/// The line of a libtorch message that says what happened: c10d's messages run on to a
/// backtrace after it; the TorchScript interpreter's end with it, after the script's traceback.
fn summary(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = if message.contains("failed in the TorchScript interpreter") {
        lines.next_back()
    } else {
        lines.next()
    };
    line.unwrap_or("libtorch failed without a message").to_owned()
}

fn c_string(s: &str) -> Result<CString, C10dError> {
    CString::new(s).map_err(|_| C10dError(format!("'{s}' contains a NUL byte")))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn non_null<T>(p: *mut T, what: &str) -> Result<NonNull<T>, C10dError> {
    NonNull::new(p).ok_or_else(|| C10dError(format!("{what} returned nothing")))
}

/// Which c10d backend a group runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Gloo,
    Nccl,
}

/// How an allreduce combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// A c10d process group: this process's membership of `size` ranks.
pub struct Group(NonNull<RawGroup>);

// SAFETY: a c10d backend may be used from any thread; dpt-tui issues collectives from one
// thread per process (the coordinator), in the same order on every rank.
unsafe impl Send for Group {}

impl Group {
    /// Joins the group as `rank` of `size`, meeting the others through `store`; collectives
    /// time out after `timeout`.
    pub fn new(
        backend: Backend,
        store: &Store,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Group, C10dError> {
        let (rank, size) = (
            i32::try_from(rank).map_err(|_| C10dError("rank too large".into()))?,
            i32::try_from(size).map_err(|_| C10dError("world size too large".into()))?,
        );
        let s = store.0.as_ptr();
        // SAFETY: live store handle; the group keeps its own reference to it.
        let p = call(|err| unsafe {
            match backend {
                Backend::Gloo => dpt_gloo_group(s, rank, size, millis(timeout), err),
                Backend::Nccl => dpt_nccl_group(s, rank, size, millis(timeout), err),
            }
        })?;
        Ok(Group(non_null(p, "process group")?))
    }

    /// Starts reducing `tensors` (one per device of this process) over all ranks, in place.
    pub fn allreduce<'a>(&self, tensors: &'a mut [Tensor], op: ReduceOp) -> Result<Work<'a>, C10dError> {
        let ptrs: Vec<*mut CTensor> = tensors.iter_mut().map(Tensor::as_mut_ptr).collect();
        let op = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
        };
        // SAFETY: live group; the tensors outlive the returned work (its lifetime).
        let p = call(|err| unsafe { dpt_allreduce(self.0.as_ptr(), ptrs.as_ptr(), ptrs.len(), op, err) })?;
        Ok(Work(non_null(p, "allreduce")?, PhantomData))
    }

    /// As [`Group::allreduce`], for handles (views, shallow clones) given up to the collective:
    /// c10d keeps its own references to their storage until the work ends, and the caller
    /// reads that storage only after waiting, as with any collective in flight.
    pub fn allreduce_owned(
        &self,
        mut tensors: Vec<Tensor>,
        op: ReduceOp,
    ) -> Result<Work<'static>, C10dError> {
        let work = self.allreduce(&mut tensors, op)?;
        let raw = work.0;
        std::mem::forget(work);
        Ok(Work(raw, PhantomData))
    }

    /// Starts copying `root`'s `tensors` to every rank, in place.
    pub fn broadcast<'a>(&self, tensors: &'a mut [Tensor], root: usize) -> Result<Work<'a>, C10dError> {
        let root = i32::try_from(root).map_err(|_| C10dError("root rank too large".into()))?;
        let ptrs: Vec<*mut CTensor> = tensors.iter_mut().map(Tensor::as_mut_ptr).collect();
        // SAFETY: as in `allreduce_sum`.
        let p = call(|err| unsafe { dpt_broadcast(self.0.as_ptr(), ptrs.as_ptr(), ptrs.len(), root, err) })?;
        Ok(Work(non_null(p, "broadcast")?, PhantomData))
    }
}

impl Group {
    /// Starts summing every rank's `tensor` into rank `root`'s, in place there; the others'
    /// hold partial sums afterwards, to be read by nobody. As with [`Group::allreduce_owned`], c10d keeps its own reference
    /// to the storage until the work ends, and the caller reads it only after waiting.
    pub fn reduce_owned(&self, tensor: Tensor, root: usize) -> Result<Work<'static>, C10dError> {
        let root = i32::try_from(root).map_err(|_| C10dError("root rank too large".into()))?;
        let mut tensors = [tensor];
        let ptrs: Vec<*mut CTensor> = tensors.iter_mut().map(Tensor::as_mut_ptr).collect();
        // SAFETY: live group and tensor handle; c10d holds its own reference to the tensor's
        // storage for the work's life, so the handle may go when this returns.
        let p = call(|err| unsafe { dpt_reduce(self.0.as_ptr(), ptrs.as_ptr(), ptrs.len(), root, err) })?;
        Ok(Work(non_null(p, "reduce")?, PhantomData))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { dpt_group_free(self.0.as_ptr()) }
    }
}

/// A collective in flight; its tensors stay borrowed until it is waited for or dropped.
#[must_use = "a collective must be waited for before its tensors are read"]
pub struct Work<'a>(NonNull<RawWork>, PhantomData<&'a mut [Tensor]>);

// SAFETY: c10d work objects may be waited on from another thread.
unsafe impl Send for Work<'_> {}

impl Work<'_> {
    /// Waits for the collective, up to `timeout`; the host blocks until it is done (for NCCL
    /// too: a timeout makes `WorkNCCL::wait` block the host).
    pub fn wait(self, timeout: Duration) -> Result<(), C10dError> {
        // SAFETY: live work handle.
        call(|err| unsafe { dpt_work_wait(self.0.as_ptr(), millis(timeout), err) }).map(drop)
    }

    /// Waits without a timeout of its own (c10d's `kNoTimeout`): for NCCL the current CUDA
    /// stream waits for the collective and the host goes on (torch 2.11's `WorkNCCL::wait` with
    /// a timeout blocks the host instead); Gloo blocks until done, within the group's timeout.
    pub fn wait_on_stream(self) -> Result<(), C10dError> {
        self.wait(Duration::ZERO)
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { dpt_work_free(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn a_message_is_summed_up_by_the_line_that_says_what_happened() {
        let c10d = "Connection refused\nException raised from foo at bar.cpp:12\nframe #0: ...";
        assert_eq!(summary(c10d), "Connection refused");
        let script = "The following operation failed in the TorchScript interpreter.\n\
                      Traceback of TorchScript (most recent call last):\n  File \"code/__torch__.py\", line 9\n\
                      RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x784 and 100x10)\n";
        assert_eq!(
            summary(script),
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x784 and 100x10)"
        );
        assert_eq!(summary(""), "libtorch failed without a message");
    }

    #[test]
    fn setting_a_thread_device_that_is_not_there_is_a_clean_error() {
        if tch::Cuda::device_count() > 0 {
            return;
        }
        let e = super::set_thread_device(0).expect_err("no CUDA device here");
        assert!(e.0.contains("CUDA"), "{e}");
        assert!(!super::context_made(0), "no context is claimed on failure");
    }

    #[test]
    fn a_stream_of_its_own_is_current_while_entered_and_the_old_one_after() {
        let e = super::OwnStream::enter(1000).err().expect("no process sees 1000 GPUs");
        assert!(e.0.contains("CUDA"), "{e}");
        let cpu = tch::Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu));
        assert!(super::record_stream(&cpu).is_err(), "a CPU tensor has no stream");
        if tch::Cuda::device_count() == 0 {
            return;
        }
        super::set_thread_device(0).unwrap();
        let before = super::current_stream(0).unwrap();
        let own = super::OwnStream::enter(0).unwrap();
        let inside = super::current_stream(0).unwrap();
        assert_ne!(inside, before, "a pool stream, not the one current before");
        drop(own);
        assert_eq!(super::current_stream(0).unwrap(), before);
        let again = super::OwnStream::reenter(0, inside).unwrap();
        assert_eq!(super::current_stream(0).unwrap(), inside, "the same stream entered again");
        drop(again);
        assert_eq!(super::current_stream(0).unwrap(), before);
    }

    #[test]
    fn a_stream_entered_again_without_its_device_is_a_clean_error() {
        let e = super::OwnStream::reenter(1000, 0).err().expect("no process sees 1000 GPUs");
        assert!(e.0.contains("CUDA"), "{e}");
    }

    #[test]
    fn the_cuda_peak_of_a_device_that_is_not_there_is_a_clean_error() {
        let e = super::cuda_peak_allocated(1000).expect_err("no process sees 1000 GPUs");
        assert!(e.0.contains("CUDA"), "{e}");
        assert!(super::cuda_reset_peak(1000).is_err());
        // Without NVIDIA's driver, no device at all.
        if !std::path::Path::new("/proc/driver/nvidia").exists() {
            let e = super::cuda_peak_allocated(0).expect_err("no CUDA device here");
            assert!(e.0.contains("CUDA"), "{e}");
            let e = super::cuda_reset_peak(0).expect_err("no CUDA device here");
            assert!(e.0.contains("CUDA"), "{e}");
        }
    }

    #[test]
    fn the_cuda_peak_is_what_the_allocator_held_at_most_and_a_reset_starts_it_again() {
        if tch::Cuda::device_count() == 0 {
            return;
        }
        super::set_thread_device(0).unwrap();
        let device = tch::Device::Cuda(0);
        let mib = 1 << 20;
        super::cuda_reset_peak(0).unwrap();
        let base = super::cuda_peak_allocated(0).unwrap();
        {
            let big = tch::Tensor::zeros([64 * mib / 4], (tch::Kind::Float, device));
            let _ = big.sum(tch::Kind::Float).double_value(&[]);
            assert!(super::cuda_peak_allocated(0).unwrap() >= base + 64 * mib as u64);
        }
        assert!(
            super::cuda_peak_allocated(0).unwrap() >= base + 64 * mib as u64,
            "a peak outlives its tensor"
        );
        super::cuda_reset_peak(0).unwrap();
        assert!(super::cuda_peak_allocated(0).unwrap() < base + 64 * mib as u64, "the reset forgets it");
    }
}
