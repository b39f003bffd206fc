//! CUDA graphs (`graph_shim.cpp`): one replica's work on one device captured once and replayed
//! with one launch, as `torch.cuda.CUDAGraph` does. A capture runs on the calling thread's
//! current stream (not the default one), in thread-local mode, into a memory pool of the
//! graph's own; one that fails is abandoned and the graph can capture again.

use std::ffi::c_char;
use std::ptr::NonNull;

use super::{call, non_null, C10dError};

#[repr(C)]
struct RawGraph {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_cuda_graph_new(device: i32, err: *mut *mut c_char) -> *mut RawGraph;
    fn dpt_cuda_graph_capture_begin(g: *mut RawGraph, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_graph_capture_end(g: *mut RawGraph, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_graph_abandon(g: *mut RawGraph, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_graph_replay(g: *mut RawGraph, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_graph_free(g: *mut RawGraph);
}

/// A CUDA graph on one device: empty, then captured, then replayed.
pub struct CudaGraph(NonNull<RawGraph>);

// SAFETY: the graph is used by one thread at a time (`&mut self`); CUDA allows its capture and
// replay from any host thread, on that thread's current stream.
unsafe impl Send for CudaGraph {}

impl CudaGraph {
    /// An empty graph on CUDA device `index`; an error without that device or a CUDA build.
    pub fn new(index: usize) -> Result<CudaGraph, C10dError> {
        let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
        // SAFETY: plain value argument; the shim returns an owned handle or an error.
        let p = call(|err| unsafe { dpt_cuda_graph_new(device, err) })?;
        Ok(CudaGraph(non_null(p, "CUDA graph")?))
    }

    /// Captures the CUDA work `work` queues on the calling thread's current stream (the thread's
    /// other CUDA calls must not sync; no other thread may capture meanwhile). `work`'s error,
    /// or a capture the device refused, leaves the graph empty and the stream as it was, and is
    /// returned: the caller runs the work eagerly instead.
    pub fn capture<T, E: From<C10dError>>(&mut self, work: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let begun = self.begin();
        let done = match begun {
            Ok(()) => work().and_then(|out| self.end().map(|()| out).map_err(E::from)),
            Err(e) => Err(E::from(e)),
        };
        if done.is_err() {
            // The failure is the capture's; a second one, while abandoning it, says no more.
            let _ = self.abandon();
        }
        done
    }

    /// Runs the captured work again on the calling thread's current stream (one launch).
    pub fn replay(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_graph_replay(self.0.as_ptr(), err) }).map(drop)
    }

    fn begin(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_graph_capture_begin(self.0.as_ptr(), err) }).map(drop)
    }

    fn end(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_graph_capture_end(self.0.as_ptr(), err) }).map(drop)
    }

    fn abandon(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_graph_abandon(self.0.as_ptr(), err) }).map(drop)
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: we own the handle; the shim abandons a capture still under way.
        unsafe { dpt_cuda_graph_free(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::CudaGraph;

    #[test]
    fn a_graph_without_a_cuda_device_is_an_error_not_an_abort() {
        let devices = tch::Cuda::device_count() as usize;
        let refused = CudaGraph::new(devices).err().expect("no graph on a device this process does not see");
        assert!(refused.0.contains("CUDA"), "{}", refused.0);
        if devices == 0 {
            assert!(CudaGraph::new(0).is_err(), "a machine without a GPU makes no graph");
        }
    }
}
