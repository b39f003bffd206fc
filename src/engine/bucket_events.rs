//! On GPUs, what orders the reading of a gradient bucket after its writes: for each stream the
//! bucket's gradients were written on (autograd runs a parameter's backward kernels on its
//! forward pass's stream: the replica's, or a model's own), one event, recorded on that stream
//! once the bucket is complete, not after each of its gradients. A write only notes its stream;
//! the hook that completes the bucket records the event of every stream written since the last
//! record (cudaEventRecord may name another thread's stream: what it queued is in the past), and
//! so does the end of the backward pass for a bucket no hook completed (a parameter the pass did
//! not reach). The coordinator's reading stream waits for this step's events
//! ([`BucketEvents::wait`]). Events are made the first time a bucket meets a stream and kept.

use dpt_sys::c10d::{C10dError, CudaEvent};

/// An event that can be recorded on a named stream and waited for by the calling thread's
/// current stream (a CUDA event; a fake in tests).
pub trait StreamMark: Send {
    fn record_on(&mut self, stream: i64) -> Result<(), C10dError>;
    fn wait(&self) -> Result<(), C10dError>;
}

impl StreamMark for CudaEvent {
    fn record_on(&mut self, stream: i64) -> Result<(), C10dError> {
        CudaEvent::record_on(self, stream)
    }
    fn wait(&self) -> Result<(), C10dError> {
        self.block()
    }
}

/// A bucket's event on one stream.
struct Handed<M> {
    stream: i64,
    event: M,
    /// Written since its last record.
    pending: bool,
    /// The step that last recorded it.
    step: u64,
}

/// Makes an event on a CUDA device.
type Make<M> = Box<dyn Fn(usize) -> Result<M, C10dError> + Send>;

/// Every bucket's events of one replica.
pub struct BucketEvents<M: StreamMark = CudaEvent> {
    buckets: Vec<Vec<Handed<M>>>,
    make: Make<M>,
}

impl BucketEvents {
    /// The events of `buckets` buckets, CUDA events made when first needed.
    pub fn new(buckets: usize) -> BucketEvents {
        BucketEvents::with(buckets, Box::new(CudaEvent::ordering))
    }
}

impl<M: StreamMark> BucketEvents<M> {
    pub fn with(buckets: usize, make: Make<M>) -> BucketEvents<M> {
        BucketEvents { buckets: (0..buckets).map(|_| Vec::new()).collect(), make }
    }

    /// A gradient of bucket `b` was written on stream `stream` of CUDA device `device`.
    pub fn wrote(&mut self, b: usize, (device, stream): (usize, i64)) -> Result<(), C10dError> {
        let handed = &mut self.buckets[b];
        match handed.iter_mut().find(|h| h.stream == stream) {
            Some(h) => h.pending = true,
            None => handed.push(Handed { stream, event: (self.make)(device)?, pending: true, step: 0 }),
        }
        Ok(())
    }

    /// Bucket `b`'s writes of step `step` are all queued: records the event of each stream
    /// written since its last record.
    pub fn seal(&mut self, b: usize, step: u64) -> Result<(), C10dError> {
        for h in self.buckets[b].iter_mut().filter(|h| h.pending) {
            h.event.record_on(h.stream)?;
            (h.pending, h.step) = (false, step);
        }
        Ok(())
    }

    /// The backward pass of step `step` is over: seals every bucket still written since its
    /// last record.
    pub fn seal_all(&mut self, step: u64) -> Result<(), C10dError> {
        (0..self.buckets.len()).try_for_each(|b| self.seal(b, step))
    }

    /// Makes the calling thread's current stream wait for bucket `b`'s writes of step `step`.
    pub fn wait(&self, b: usize, step: u64) -> Result<(), C10dError> {
        self.buckets[b].iter().filter(|h| h.step == step).try_for_each(|h| h.event.wait())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What the fake events did, in order: `record s` on stream s, `wait s`.
    type Log = Arc<Mutex<Vec<String>>>;

    struct Fake {
        log: Log,
        stream: Option<i64>,
    }

    impl StreamMark for Fake {
        fn record_on(&mut self, stream: i64) -> Result<(), C10dError> {
            self.stream = Some(stream);
            self.log.lock().unwrap().push(format!("record {stream}"));
            Ok(())
        }
        fn wait(&self) -> Result<(), C10dError> {
            self.log.lock().unwrap().push(format!("wait {}", self.stream.unwrap()));
            Ok(())
        }
    }

    fn events(buckets: usize) -> (BucketEvents<Fake>, Log) {
        let log = Log::default();
        let made = Arc::clone(&log);
        let make: Make<Fake> = Box::new(move |_| Ok(Fake { log: Arc::clone(&made), stream: None }));
        (BucketEvents::with(buckets, make), log)
    }

    fn taken(log: &Log) -> Vec<String> {
        std::mem::take(&mut *log.lock().unwrap())
    }

    #[test]
    fn a_bucket_records_one_event_per_stream_when_it_is_complete_not_per_gradient() {
        let (mut e, log) = events(2);
        for _ in 0..5 {
            e.wrote(0, (0, 7)).unwrap();
        }
        assert!(taken(&log).is_empty(), "nothing recorded while the bucket fills");
        e.seal(0, 1).unwrap();
        assert_eq!(taken(&log), ["record 7"]);
        e.wait(0, 1).unwrap();
        assert_eq!(taken(&log), ["wait 7"]);
        // Gradients on two streams, the second completing the bucket: both streams recorded.
        e.wrote(1, (0, 7)).unwrap();
        e.wrote(1, (0, 9)).unwrap();
        e.wrote(1, (0, 7)).unwrap();
        e.seal(1, 1).unwrap();
        assert_eq!(taken(&log), ["record 7", "record 9"]);
    }

    #[test]
    fn the_end_of_the_backward_pass_seals_what_no_hook_completed_and_waits_take_this_step_only() {
        let (mut e, log) = events(3);
        e.wrote(0, (0, 7)).unwrap();
        e.seal(0, 1).unwrap();
        e.wrote(2, (0, 7)).unwrap();
        taken(&log);
        e.seal_all(1).unwrap();
        assert_eq!(taken(&log), ["record 7"], "only bucket 2 was written since its record");
        // Step 2 writes bucket 0 only: bucket 2's event is step 1's and is not waited for.
        e.wrote(0, (0, 7)).unwrap();
        e.seal_all(2).unwrap();
        taken(&log);
        e.wait(2, 2).unwrap();
        e.wait(1, 2).unwrap();
        assert!(taken(&log).is_empty(), "buckets not written this step have nothing to wait for");
        e.wait(0, 2).unwrap();
        assert_eq!(taken(&log), ["wait 7"]);
    }
}
