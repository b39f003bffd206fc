//! Device values read without a drain. A host read of a GPU tensor (`.item()`, `.tolist()`)
//! waits for everything queued on the stream, the step in flight included. A [`LateRead`]
//! instead queues a copy into page-locked host memory where the values are ready (PyTorch's
//! `.to("cpu", non_blocking=True)`, whose result is pinned) and records an event after it; it is
//! read when asked, a report window later, by when the copy has long run. On the CPU the values
//! are held as they are.

use thiserror::Error;
use tch::{Device, Kind, Tensor};

use super::gpu_wait::{WaitError, Waiting};
use dpt_sys::c10d::CudaEvent;

/// Why a late read failed.
#[derive(Debug, Error)]
pub enum LateReadError {
    #[error(transparent)]
    Wait(#[from] WaitError),
    #[error("reading a device value failed: {0}")]
    Torch(#[from] tch::TchError),
    #[error("internal error: {got} device values read where {expected} were copied (a bug in dpt-tui; please report it)")]
    Count { got: usize, expected: usize },
}

/// Values on their way to the host: started where they were computed, read later.
pub struct LateRead {
    /// The values on the host (page-locked, being copied) or, on the CPU, where they are.
    host: Tensor,
    /// Recorded after the copy on the stream that queued it; none on the CPU.
    copied: Option<CudaEvent>,
}

impl LateRead {
    /// Starts the copy of `values` (any shape, read as f64) on the calling thread's current
    /// stream of their device. The values may change on the device after this returns: the copy
    /// is queued before anything queued later.
    pub fn start(values: &Tensor) -> Result<LateRead, LateReadError> {
        let values = values.f_to_kind(Kind::Double)?.f_reshape([-1])?;
        match values.device() {
            Device::Cuda(index) => {
                let host = values.f_to_device_(Device::Cpu, Kind::Double, true, false)?;
                let mut copied = CudaEvent::ordering(index).map_err(WaitError::from)?;
                copied.record().map_err(WaitError::from)?;
                Ok(LateRead { host, copied: Some(copied) })
            }
            // A CPU tensor computed by the caller's own thread is already there; a copy keeps
            // it from an in-place change that comes later.
            _ => Ok(LateRead { host: values.f_detach_copy()?, copied: None }),
        }
    }

    /// The values, once the copy has run (polled against `waiting`'s deadline, which a copy
    /// started a window ago has long met).
    pub fn read(self, waiting: &Waiting) -> Result<Vec<f64>, LateReadError> {
        if let Some(copied) = &self.copied {
            waiting.poll(copied)?;
        }
        Ok(Vec::<f64>::try_from(&self.host)?)
    }

    /// The values, `N` of them as started.
    pub fn read_exactly<const N: usize>(self, waiting: &Waiting) -> Result<[f64; N], LateReadError> {
        let read = self.read(waiting)?;
        let got = read.len();
        <[f64; N]>::try_from(read).map_err(|_| LateReadError::Count { got, expected: N })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_later_are_those_at_the_start_not_after_a_later_change() {
        let mut sums = Tensor::from_slice(&[2.5f32, 7.0]);
        let late = LateRead::start(&sums).expect("started");
        let _ = sums.zero_();
        let waiting = crate::engine::clock::waiting("a test", "cpu", std::time::Duration::from_secs(1));
        assert_eq!(late.read(&waiting).expect("read"), [2.5, 7.0]);
    }
}
