//! Device tensors copied to the host without a drain, for what outlives a step: a rewind point,
//! a periodic checkpoint. A blocking copy (`.to("cpu")`) waits for everything queued on the
//! stream and lands in pageable memory, copied a second time by the driver. A [`Landing`]
//! instead queues each copy on a stream of its own per GPU (off the streams that compute),
//! after the work queued so far on the calling thread's stream, into page-locked memory from
//! libtorch's caching host allocator (what `.to("cpu", non_blocking=True)` returns), which
//! reuses a block once its copy has run and its tensor is gone. What it gives back are two
//! orderings: an [`Arrival`] that the reader waits for before it reads the host tensors, and a
//! [`WriteFence`] that the writer of the device tensors holds before it changes them. On the
//! CPU a tensor is copied at once and neither has anything to wait for.

use std::cell::RefCell;
use std::sync::Mutex;

use tch::{Device, Tensor};
use thiserror::Error;

use super::gpu_wait::{WaitError, Waiting};
use dpt_sys::c10d::{current_stream, record_stream, C10dError, CudaEvent, OwnStream};

/// Why a host copy could not be queued.
#[derive(Debug, Error)]
pub enum LandingError {
    #[error("copying to the host failed: {0}")]
    Cuda(#[from] C10dError),
    #[error("copying to the host failed: {0}")]
    Torch(#[from] tch::TchError),
}

/// The copy stream of each GPU this process copied from, by device index: one for the
/// process's life, taken from c10's pool as the first copy from that GPU is queued.
static COPY_STREAMS: Mutex<Vec<(usize, i64)>> = Mutex::new(Vec::new());

/// GPU `index`'s copy stream.
fn copy_stream(index: usize) -> Result<i64, C10dError> {
    let mut streams = COPY_STREAMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, id)) = streams.iter().find(|(i, _)| *i == index) {
        return Ok(id);
    }
    let entered = OwnStream::enter(index)?;
    let id = current_stream(index)?;
    drop(entered);
    streams.push((index, id));
    Ok(id)
}

/// What has been queued on one GPU.
struct OnDevice {
    index: usize,
    /// The copy stream's id.
    stream: i64,
    /// Recorded on the calling thread's stream before each copy, waited for on the copy stream.
    ready: CudaEvent,
}

/// Host copies being queued; [`Landing::finish`] ends them.
#[derive(Default)]
pub struct Landing {
    devices: RefCell<Vec<OnDevice>>,
}

impl Landing {
    pub fn new() -> Landing {
        Landing::default()
    }

    /// `t` on the host: on a GPU, a page-locked tensor that its device's copy stream fills
    /// once the work queued so far on the calling thread's stream has run. Until the
    /// [`WriteFence`] is held, nothing may change `t` on the device; until the [`Arrival`],
    /// nothing may read the result.
    pub fn land(&self, t: &Tensor) -> Result<Tensor, LandingError> {
        self.copy(t)
    }

    /// `t` on the host, for a tensor another thread's stream writes after the commands this
    /// thread sends (the BatchNorm statistics a replica's forward pass updates), which a
    /// [`WriteFence`] held on this thread would not order: copied on the device first, in order
    /// on the calling thread's stream, and that copy landed as [`Landing::land`] lands. The
    /// page-locked block then only ever meets the copy stream, never a stream a graph is
    /// captured on (freeing a block records an event on each stream it met).
    pub fn land_in_order(&self, t: &Tensor) -> Result<Tensor, LandingError> {
        match t.device() {
            Device::Cuda(_) => self.copy(&t.f_detach_copy()?),
            _ => self.copy(t),
        }
    }

    fn copy(&self, t: &Tensor) -> Result<Tensor, LandingError> {
        let Device::Cuda(index) = t.device() else { return Ok(t.f_detach_copy()?) };
        let mut devices = self.devices.borrow_mut();
        let at = match devices.iter().position(|d| d.index == index) {
            Some(at) => at,
            None => {
                let (stream, ready) = (copy_stream(index)?, CudaEvent::ordering(index)?);
                devices.push(OnDevice { index, stream, ready });
                devices.len() - 1
            }
        };
        let d = &mut devices[at];
        d.ready.record()?;
        let _copy = OwnStream::reenter(index, d.stream)?;
        d.ready.block()?;
        let host = t.f_to_device_(Device::Cpu, t.kind(), true, false)?;
        // The copy stream reads `t`: a temporary freed meanwhile is not reused before it has.
        record_stream(t)?;
        Ok(host)
    }

    /// Ends the copies queued: what the reader waits for, and what the writer holds.
    pub fn finish(self) -> Result<(Arrival, WriteFence), LandingError> {
        let (mut arrival, mut fence) = (Vec::new(), Vec::new());
        for d in self.devices.into_inner() {
            let (mut read, mut write) = (CudaEvent::ordering(d.index)?, CudaEvent::ordering(d.index)?);
            let _copy = OwnStream::reenter(d.index, d.stream)?;
            read.record()?;
            write.record()?;
            arrival.push(read);
            fence.push(write);
        }
        Ok((Arrival(arrival), WriteFence(fence)))
    }
}

/// When the host copies of a [`Landing`] have arrived.
pub struct Arrival(Vec<CudaEvent>);

impl Arrival {
    /// Copies that were made at once (nothing to wait for).
    pub fn at_once() -> Arrival {
        Arrival(Vec::new())
    }

    /// Whether every copy has run (never waits).
    pub fn arrived(&self) -> Result<bool, C10dError> {
        for e in &self.0 {
            if !e.query()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits for every copy, polled against `waiting`'s deadline.
    pub fn wait(&self, waiting: &Waiting) -> Result<(), WaitError> {
        self.0.iter().try_for_each(|e| waiting.poll(e))
    }
}

/// What the writer of landed device tensors holds before it changes them: its stream waits, on
/// the GPU, for the copy streams to have read them (the host does not wait).
#[derive(Default)]
pub struct WriteFence(Vec<CudaEvent>);

impl WriteFence {
    /// Adds `other`'s copies to those to hold.
    pub fn join(&mut self, other: WriteFence) {
        self.0.extend(other.0);
    }

    /// Whether nothing is left to hold.
    pub fn is_clear(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes the calling thread's stream of each GPU wait for the copies queued there; then
    /// nothing is left to hold.
    pub fn hold(&mut self) -> Result<(), C10dError> {
        self.0.drain(..).try_for_each(|e| e.block())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_tensor_lands_at_once_and_a_later_change_does_not_reach_it() {
        let mut flat = Tensor::from_slice(&[1.5f32, -2.0, 4.0]);
        let landing = Landing::new();
        let (aside, in_order) = (landing.land(&flat).unwrap(), landing.land_in_order(&flat.narrow(0, 1, 2)).unwrap());
        let _ = flat.fill_(9.0);
        let (arrival, mut fence) = landing.finish().unwrap();
        assert!(arrival.arrived().unwrap() && fence.is_clear(), "nothing to wait for on the CPU");
        fence.hold().unwrap();
        let waiting = crate::engine::clock::waiting("a test", "cpu", std::time::Duration::from_secs(1));
        arrival.wait(&waiting).unwrap();
        assert_eq!(Vec::<f32>::try_from(&aside).unwrap(), [1.5, -2.0, 4.0]);
        assert_eq!(Vec::<f32>::try_from(&in_order).unwrap(), [-2.0, 4.0]);
    }

    #[test]
    fn a_gpu_tensor_lands_pinned_after_the_work_before_it_and_before_a_fenced_write() {
        if tch::Cuda::device_count() == 0 {
            return;
        }
        let own = OwnStream::enter(0).unwrap();
        let mut flat = Tensor::full([1 << 20], 3.0, (tch::Kind::Float, Device::Cuda(0)));
        let landing = Landing::new();
        let host = landing.land(&flat).unwrap();
        let (arrival, mut fence) = landing.finish().unwrap();
        fence.hold().unwrap();
        let _ = flat.fill_(7.0);
        let waiting = crate::engine::clock::waiting("a test", "cuda:0", std::time::Duration::from_secs(30));
        arrival.wait(&waiting).unwrap();
        assert!(host.is_pinned(Device::Cuda(0)), "page-locked, from the caching host allocator");
        assert_eq!(host.sum(tch::Kind::Double).double_value(&[]), 3.0 * f64::from(1 << 20));
        drop(own);
    }
}
