//! The overlap figure on GPUs, from device events. Where the allreduce sums buckets on the
//! GPUs' side streams (several GPUs in one process), the host's view — a bucket launched while a
//! backward pass was still running — says nothing of when the GPU ran it. So on sampled steps
//! the coordinator records a timing event on GPU 0's side stream after each bucket's sum (the
//! last bucket left out: it waits for the last gradient) and one on GPU 0's compute stream once
//! every replica's backward pass is queued; a bucket overlapped when its sum finished before
//! the backward pass did. The events are read without waiting, as the phase clock's are.

use crate::engine::clock::DeviceMark;
use dpt_sys::c10d::{C10dError, CudaEvent};

/// Marks one sampled step's bucket sums and backward end on one GPU.
pub(super) struct OverlapProbe<M: DeviceMark = CudaEvent> {
    /// Makes a mark on the GPU (one per bucket, made when first needed).
    make: Box<dyn Fn() -> Result<M, C10dError> + Send>,
    sums: Vec<M>,
    backward_end: M,
    /// The step being probed: how many bucket sums it marked so far.
    probing: Option<usize>,
    /// A probed step the GPU had not passed yet: how many bucket sums it marked.
    unread: Option<usize>,
}

impl OverlapProbe {
    /// A probe on CUDA device `index`.
    pub(super) fn on_gpu(index: usize) -> Result<OverlapProbe, C10dError> {
        OverlapProbe::with(Box::new(move || CudaEvent::new(index)))
    }
}

impl<M: DeviceMark> OverlapProbe<M> {
    pub(super) fn with(
        make: Box<dyn Fn() -> Result<M, C10dError> + Send>,
    ) -> Result<OverlapProbe<M>, C10dError> {
        let backward_end = make()?;
        Ok(OverlapProbe { make, sums: Vec::new(), backward_end, probing: None, unread: None })
    }

    /// A step begins: probed when it is sampled and the marks are free.
    pub(super) fn begin(&mut self, sampled: bool) {
        self.probing = (sampled && self.unread.is_none()).then_some(0);
    }

    /// Bucket `b` of `buckets` was summed (queued on the side stream).
    pub(super) fn summed(&mut self, b: usize, buckets: usize) -> Result<(), C10dError> {
        let Some(marked) = self.probing.as_mut() else { return Ok(()) };
        if b + 1 >= buckets || b != *marked {
            return Ok(());
        }
        if self.sums.len() <= b {
            self.sums.push((self.make)()?);
        }
        self.sums[b].record_side()?;
        *marked += 1;
        Ok(())
    }

    /// Every replica's backward pass is queued: marks its end on the compute stream.
    pub(super) fn backward_queued(&mut self) -> Result<(), C10dError> {
        if let Some(marked) = self.probing.take() {
            self.backward_end.record()?;
            self.unread = Some(marked);
        }
        Ok(())
    }

    /// A probed step's figure once the GPU has passed its marks (never waits): the buckets
    /// whose sum finished before the backward pass, and the buckets marked.
    pub(super) fn read(&mut self) -> Result<Option<(usize, usize)>, C10dError> {
        let Some(marked) = self.unread else { return Ok(None) };
        let all = std::iter::once(&self.backward_end).chain(&self.sums[..marked]);
        for mark in all {
            if !mark.passed()? {
                return Ok(None);
            }
        }
        self.unread = None;
        let mut early = 0;
        for sum in &self.sums[..marked] {
            if sum.seconds_until(&self.backward_end)? > 0.0 {
                early += 1;
            }
        }
        Ok(Some((early, marked)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::fake::{FakeDevice, FakeMark};
    use std::sync::atomic::Ordering;

    fn probe(device: &FakeDevice) -> OverlapProbe<FakeMark> {
        let d = device.clone();
        OverlapProbe::with(Box::new(move || Ok(d.mark()))).unwrap()
    }

    #[test]
    fn a_bucket_overlapped_when_its_sum_ended_before_the_backward_pass() {
        let device = FakeDevice::default();
        let mut p = probe(&device);
        // Three buckets: the first two are marked (the last waits for the last gradient).
        p.begin(true);
        p.summed(0, 3).unwrap();
        // The second bucket's sum runs late on the side stream: after the backward pass.
        device.side_lag.store(5, Ordering::SeqCst);
        p.summed(1, 3).unwrap();
        p.summed(2, 3).unwrap();
        p.backward_queued().unwrap();
        assert_eq!(p.read().unwrap(), None, "nothing passed yet: never waits");
        device.reached.store(3, Ordering::SeqCst);
        assert_eq!(p.read().unwrap(), None, "the late sum is not passed yet");
        device.reached.store(10, Ordering::SeqCst);
        assert_eq!(p.read().unwrap(), Some((1, 2)));
        assert_eq!(p.read().unwrap(), None, "read once");
    }

    #[test]
    fn unsampled_steps_and_steps_while_one_is_unread_mark_nothing() {
        let device = FakeDevice::default();
        let mut p = probe(&device);
        p.begin(false);
        p.summed(0, 2).unwrap();
        p.backward_queued().unwrap();
        assert_eq!(device.queued.load(Ordering::SeqCst), 0);
        p.begin(true);
        p.summed(0, 2).unwrap();
        p.backward_queued().unwrap();
        assert_eq!(device.queued.load(Ordering::SeqCst), 2);
        p.begin(true);
        p.summed(0, 2).unwrap();
        p.backward_queued().unwrap();
        assert_eq!(device.queued.load(Ordering::SeqCst), 2, "the marks are still the unread step's");
        device.reached.store(2, Ordering::SeqCst);
        assert_eq!(p.read().unwrap(), Some((1, 1)));
    }
}
