//! The CUDA side of the shim (`c10d_nccl.cpp`): device identities, the single-process NCCL
//! allreduce, and timing events (c10's device-generic events).

use std::ffi::c_char;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use tch::Tensor;

use super::{call, non_null, C10dError, CTensor, CudaIdentity};

#[repr(C)]
struct RawEvent {
    _private: [u8; 0],
}

#[repr(C)]
struct RawStreamGuard {
    _private: [u8; 0],
}

#[repr(C)]
struct RawOwnStream {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_cuda_event_new(device: i32, timing: i32, err: *mut *mut c_char) -> *mut RawEvent;
    fn dpt_cuda_event_block(e: *mut RawEvent, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_event_record(e: *mut RawEvent, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_event_record_side(e: *mut RawEvent, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_event_record_on(e: *mut RawEvent, stream: i64, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_event_query(e: *mut RawEvent, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_set_device(device: i32, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_event_elapsed_ms(
        a: *mut RawEvent,
        b: *mut RawEvent,
        ms: *mut f32,
        err: *mut *mut c_char,
    ) -> i32;
    fn dpt_cuda_event_free(e: *mut RawEvent);
    fn dpt_cuda_peak_bytes(device: i32, reset: i32, out: *mut i64, err: *mut *mut c_char) -> i32;
    fn dpt_nccl_local_allreduce(t: *const *mut CTensor, n: usize, err: *mut *mut c_char) -> i32;
    fn dpt_nccl_side_join(t: *const *mut CTensor, n: usize, err: *mut *mut c_char) -> i32;
    fn dpt_record_stream(t: *mut CTensor, err: *mut *mut c_char) -> i32;
    fn dpt_side_stream_enter(device: i32, err: *mut *mut c_char) -> *mut RawStreamGuard;
    fn dpt_side_stream_leave(g: *mut RawStreamGuard);
    fn dpt_own_stream_enter(device: i32, err: *mut *mut c_char) -> *mut RawOwnStream;
    fn dpt_own_stream_reenter(device: i32, stream: i64, err: *mut *mut c_char) -> *mut RawOwnStream;
    fn dpt_own_stream_leave(s: *mut RawOwnStream);
    fn dpt_cuda_current_stream(device: i32, out: *mut i64, err: *mut *mut c_char) -> i32;
    fn dpt_cuda_sync_debug(mode: i32, err: *mut *mut c_char) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn dpt_cuda_identity(
        device: i32,
        major: *mut i32,
        minor: *mut i32,
        pci_domain: *mut i32,
        pci_bus: *mut i32,
        pci_device: *mut i32,
        uuid: *mut u8,
        err: *mut *mut c_char,
    ) -> i32;
}

/// A CUDA event on one device (`torch.cuda.Event`): recorded on the device's current stream,
/// it marks when the GPU reaches that point of the queued work.
pub struct CudaEvent(NonNull<RawEvent>);

// SAFETY: a CUDA event may be recorded and queried from any host thread.
unsafe impl Send for CudaEvent {}

impl CudaEvent {
    /// A timing event on CUDA device `index` (`enable_timing=True`); an error without that
    /// device.
    pub fn new(index: usize) -> Result<CudaEvent, C10dError> {
        CudaEvent::make(index, true)
    }

    /// An event for ordering only, without timing (cheaper to record and wait for).
    pub fn ordering(index: usize) -> Result<CudaEvent, C10dError> {
        CudaEvent::make(index, false)
    }

    fn make(index: usize, timing: bool) -> Result<CudaEvent, C10dError> {
        let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
        // SAFETY: plain value arguments; the shim returns an owned handle or an error.
        let p = call(|err| unsafe { dpt_cuda_event_new(device, i32::from(timing), err) })?;
        Ok(CudaEvent(non_null(p, "CUDA event")?))
    }

    /// Makes the calling thread's current stream on the event's device wait, on the device,
    /// for the work queued before the event was recorded (the host does not wait).
    pub fn block(&self) -> Result<(), C10dError> {
        // SAFETY: live handle; the shim only reads it.
        call(|err| unsafe { dpt_cuda_event_block(self.0.as_ptr(), err) }).map(drop)
    }

    /// Records the event on its device's current stream.
    pub fn record(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_event_record(self.0.as_ptr(), err) }).map(drop)
    }

    /// Records the event on its device's side stream, where [`nccl_local_allreduce`] sums: it
    /// completes when the sums queued there so far have run.
    pub fn record_side(&mut self) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed.
        call(|err| unsafe { dpt_cuda_event_record_side(self.0.as_ptr(), err) }).map(drop)
    }

    /// Records the event on stream `stream` of its device (an id as [`current_stream`] gives,
    /// maybe another thread's current stream): it completes when the work queued there so far
    /// has run.
    pub fn record_on(&mut self, stream: i64) -> Result<(), C10dError> {
        // SAFETY: live handle, exclusively borrowed; the shim checks the stream's device.
        call(|err| unsafe { dpt_cuda_event_record_on(self.0.as_ptr(), stream, err) }).map(drop)
    }

    /// Whether the work queued before the event has run (never waits).
    pub fn query(&self) -> Result<bool, C10dError> {
        // SAFETY: live handle; the shim only reads it.
        call(|err| unsafe { dpt_cuda_event_query(self.0.as_ptr(), err) }).map(|done| done == 1)
    }

    /// The GPU time from this event to `later`, in seconds; both must have completed (wait with
    /// [`CudaEvent::query`] against a deadline first).
    pub fn seconds_until(&self, later: &CudaEvent) -> Result<f64, C10dError> {
        let mut ms = 0.0f32;
        // SAFETY: both handles are alive; `ms` is valid for one write.
        call(|err| unsafe { dpt_cuda_event_elapsed_ms(self.0.as_ptr(), later.0.as_ptr(), &mut ms, err) })?;
        Ok(f64::from(ms) / 1e3)
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { dpt_cuda_event_free(self.0.as_ptr()) }
    }
}

/// Makes CUDA device `index` the calling thread's current device, as `torch.cuda.set_device`
/// does: call it first in every thread that drives a GPU, so that nothing the thread does (c10's
/// events, NCCL, a model's `.cuda()`) makes a context on another GPU.
pub fn set_thread_device(index: usize) -> Result<(), C10dError> {
    let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
    // SAFETY: plain value argument.
    call(|err| unsafe { dpt_cuda_set_device(device, err) })?;
    // Setting a device makes its primary context (CUDA 12 and later).
    if index < 64 {
        CONTEXTS.fetch_or(1 << index, Ordering::Relaxed);
    }
    Ok(())
}

/// The CUDA devices this process has made a context on through [`set_thread_device`], a bit each.
static CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Whether this process has made its context on CUDA device `index` (so NVML lists it there).
pub fn context_made(index: usize) -> bool {
    index < 64 && CONTEXTS.load(Ordering::Relaxed) & (1 << index) != 0
}

/// The identity of CUDA device `index` (this process's numbering, after
/// `CUDA_VISIBLE_DEVICES`), through libtorch's cached device properties.
pub fn cuda_identity(index: usize) -> Result<CudaIdentity, C10dError> {
    let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
    let (mut major, mut minor, mut dom, mut bus, mut dev) = (0, 0, 0, 0, 0);
    let mut uuid = [0u8; 16];
    // SAFETY: every out-pointer is valid for one write; `uuid` holds 16 bytes.
    call(|err| unsafe {
        dpt_cuda_identity(
            device,
            &mut major,
            &mut minor,
            &mut dom,
            &mut bus,
            &mut dev,
            uuid.as_mut_ptr(),
            err,
        )
    })?;
    Ok(CudaIdentity { major, minor, pci_domain: dom, pci_bus: bus, pci_device: dev, uuid })
}

/// The most bytes of tensors held at once on CUDA device `index` through libtorch's caching
/// allocator since the process began or [`cuda_reset_peak`] (`torch.cuda.max_memory_allocated`);
/// 0 before anything was allocated there, an error without that device.
pub fn cuda_peak_allocated(index: usize) -> Result<u64, C10dError> {
    peak_bytes(index, false)
}

/// Starts CUDA device `index`'s peak again from the bytes allocated now
/// (`torch.cuda.reset_peak_memory_stats`).
pub fn cuda_reset_peak(index: usize) -> Result<(), C10dError> {
    peak_bytes(index, true).map(drop)
}

/// The peak, read before a reset when `reset`.
fn peak_bytes(index: usize, reset: bool) -> Result<u64, C10dError> {
    let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
    let mut bytes = 0i64;
    // SAFETY: plain value arguments; `bytes` is valid for one write.
    call(|err| unsafe { dpt_cuda_peak_bytes(device, i32::from(reset), &mut bytes, err) })?;
    u64::try_from(bytes).map_err(|_| C10dError(format!("the allocator reported a peak of {bytes} bytes")))
}

/// Whether this build has NCCL: a CPU tensor is refused by a shim that has it, and by name by
/// one built without it.
pub fn nccl_compiled() -> bool {
    let mut probe = [Tensor::zeros([1], (tch::Kind::Float, tch::Device::Cpu))];
    !nccl_local_allreduce(&mut probe).is_err_and(|e| e.0.contains("built without NCCL"))
}

/// Sums `tensors`, one per distinct GPU of this process, in place with one NCCL call (what
/// `nn.DataParallel` uses), queued on each GPU's side stream after the work queued so far on
/// its current stream: the kernels queued later on the current streams do not wait for it.
/// Read the sums only after [`nccl_side_join`]. CPU tensors are refused with an error.
pub fn nccl_local_allreduce(tensors: &mut [Tensor]) -> Result<(), C10dError> {
    let ptrs: Vec<*mut CTensor> = tensors.iter_mut().map(Tensor::as_mut_ptr).collect();
    // SAFETY: the tensors are alive and exclusively borrowed for the call.
    call(|err| unsafe { dpt_nccl_local_allreduce(ptrs.as_ptr(), ptrs.len(), err) }).map(drop)
}

/// Makes the current stream of each tensor's GPU wait (on the device) for the sums
/// [`nccl_local_allreduce`] queued there; one tensor per GPU is enough.
pub fn nccl_side_join(tensors: &[Tensor]) -> Result<(), C10dError> {
    let ptrs: Vec<*mut CTensor> = tensors.iter().map(Tensor::as_ptr).map(|p| p.cast_mut()).collect();
    // SAFETY: the tensors are alive for the call; the shim only reads their devices.
    call(|err| unsafe { dpt_nccl_side_join(ptrs.as_ptr(), ptrs.len(), err) }).map(drop)
}

/// Marks CUDA tensor `t` as used on the calling thread's current stream of its device
/// (`Tensor.record_stream`): once freed, its memory goes to no other tensor before the work
/// queued there so far has run. For a tensor another thread's stream made and this one reads.
/// A CPU tensor is refused.
pub fn record_stream(t: &Tensor) -> Result<(), C10dError> {
    // SAFETY: the tensor is alive for the call; the shim marks its storage's block only.
    call(|err| unsafe { dpt_record_stream(t.as_ptr().cast_mut(), err) }).map(drop)
}

/// The id of CUDA device `index`'s current stream on the calling thread (c10's `StreamId`):
/// which stream a gradient hook runs on. An error without that device or CUDA.
pub fn current_stream(index: usize) -> Result<i64, C10dError> {
    let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
    let mut id = 0i64;
    // SAFETY: plain value argument; `id` is valid for one write.
    call(|err| unsafe { dpt_cuda_current_stream(device, &mut id, err) })?;
    Ok(id)
}

/// c10's CUDA sync debug mode (`torch.cuda.set_sync_debug_mode`): what a synchronizing CUDA
/// call (a blocking copy, `.item()` of a GPU value, a stream or device synchronize) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncDebug {
    Off,
    /// Warns (printed) and counts it, on the threads that count
    /// ([`count_syncs_here`](super::warnings::count_syncs_here)).
    Warn,
    /// Fails it with an error that names it.
    Error,
}

/// Sets c10's CUDA sync debug mode for the process, and counts the calling thread's syncs; an
/// error in a build without CUDA headers.
pub fn set_cuda_sync_debug(mode: SyncDebug) -> Result<(), C10dError> {
    let mode = match mode {
        SyncDebug::Off => 0,
        SyncDebug::Warn => 1,
        SyncDebug::Error => 2,
    };
    // SAFETY: a plain value argument.
    call(|err| unsafe { dpt_cuda_sync_debug(mode, err) })?;
    super::warnings::count_syncs_here()
}

/// While alive, the side stream of a GPU (where [`nccl_local_allreduce`] sums) is the calling
/// thread's current stream there: a collective launched meanwhile (c10d's, which waits for the
/// current stream) is ordered after those sums.
pub struct SideStream(NonNull<RawStreamGuard>);

impl SideStream {
    /// Enters CUDA device `index`'s side stream; an error without that device.
    pub fn enter(index: usize) -> Result<SideStream, C10dError> {
        let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
        // SAFETY: plain value argument; the shim returns an owned guard or an error.
        let p = call(|err| unsafe { dpt_side_stream_enter(device, err) })?;
        Ok(SideStream(non_null(p, "side stream guard")?))
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        // SAFETY: we own the guard; freeing it puts the previous stream back.
        unsafe { dpt_side_stream_leave(self.0.as_ptr()) }
    }
}

/// While alive, a stream of c10's pool is the calling thread's current stream on one GPU
/// (`torch.cuda.set_stream(torch.cuda.Stream())`; the thread's current device is left as it
/// is): what the thread queues there, and what autograd queues for the backward pass of its
/// forward pass, runs on that stream, never on the legacy default stream, which would order it
/// against every other stream of the device. Work on another thread's stream is ordered
/// against it with events only ([`CudaEvent::record`] here, [`CudaEvent::block`] there).
pub struct OwnStream(NonNull<RawOwnStream>);

impl OwnStream {
    /// Enters a pool stream on CUDA device `index`; an error without that device.
    pub fn enter(index: usize) -> Result<OwnStream, C10dError> {
        let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
        // SAFETY: plain value argument; the shim returns an owned handle or an error.
        let p = call(|err| unsafe { dpt_own_stream_enter(device, err) })?;
        Ok(OwnStream(non_null(p, "stream")?))
    }

    /// Makes stream `stream` of CUDA device `index` (an id [`current_stream`] gave inside an
    /// earlier [`OwnStream::enter`]) current again: work that keeps to one stream of its own
    /// without holding it current in between. An error without that device.
    pub fn reenter(index: usize, stream: i64) -> Result<OwnStream, C10dError> {
        let device = i32::try_from(index).map_err(|_| C10dError("device index too large".into()))?;
        // SAFETY: plain value arguments; the shim returns an owned handle or an error.
        let p = call(|err| unsafe { dpt_own_stream_reenter(device, stream, err) })?;
        Ok(OwnStream(non_null(p, "stream")?))
    }
}

impl Drop for OwnStream {
    fn drop(&mut self) {
        // SAFETY: we own the handle; freeing it makes the replaced stream current again.
        unsafe { dpt_own_stream_leave(self.0.as_ptr()) }
    }
}
