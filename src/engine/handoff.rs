//! The hand-off between a GPU replica's stream and the coordinator's. Each worker queues its
//! replica's work on a stream of its own, and the coordinator its sums and updates on another
//! (`dpt_sys::c10d::OwnStream`), so two replicas on one GPU run side by side and nothing waits
//! on the legacy default stream. What orders them is this pair of events, and only it: the
//! coordinator records one on its stream before each command it sends a worker, which the
//! worker's stream waits for as the command arrives; the worker records the other on its
//! stream before each reply, which the coordinator's stream waits for as the reply arrives
//! (before anything reads it). Whatever the coordinator does to a replica's buffers then falls
//! between the replica's work before and after, as on one stream, and the host never waits.
//!
//! One event each way, recorded again for every message: a wait queued on the device keeps
//! the point the event marked when it was queued, and an event recorded again before the other
//! side waits marks a later point of the same stream, which orders no less. The gradient
//! buckets reported during the backward pass are ordered by events of their own (the sink's),
//! so they hand nothing off.

use std::sync::{Arc, Mutex, PoisonError};

use dpt_core::device::DeviceId;
use dpt_sys::c10d::{C10dError, CudaEvent};

use super::worker::FromWorker;

/// A point of the calling thread's current stream that another thread's stream can be made to
/// wait for (a CUDA event without timing; a fake in tests).
pub trait OrderMark: Send {
    /// Marks the work queued so far on the calling thread's current stream.
    fn record(&mut self) -> Result<(), C10dError>;
    /// Makes the calling thread's current stream wait, on the device, for the marked work.
    fn wait(&self) -> Result<(), C10dError>;
}

impl OrderMark for CudaEvent {
    fn record(&mut self) -> Result<(), C10dError> {
        CudaEvent::record(self)
    }
    fn wait(&self) -> Result<(), C10dError> {
        self.block()
    }
}

/// One replica's two events: the coordinator's to the worker and the worker's back.
pub struct Handoff<M: OrderMark = CudaEvent> {
    commands: Mutex<M>,
    replies: Mutex<M>,
}

impl Handoff {
    /// The hand-off of a replica on `device`: none on the CPU, whose work runs in order.
    pub fn for_device(device: DeviceId) -> Result<Option<Arc<Handoff>>, C10dError> {
        match device {
            DeviceId::Cpu => Ok(None),
            DeviceId::Cuda(i) => Ok(Some(Arc::new(Handoff::with(CudaEvent::ordering(i)?, CudaEvent::ordering(i)?)))),
        }
    }
}

impl<M: OrderMark> Handoff<M> {
    pub fn with(commands: M, replies: M) -> Handoff<M> {
        Handoff { commands: Mutex::new(commands), replies: Mutex::new(replies) }
    }

    /// The coordinator, before it sends a command: marks its stream's work so far.
    pub fn command_sent(&self) -> Result<(), C10dError> {
        self.commands.lock().unwrap_or_else(PoisonError::into_inner).record()
    }

    /// The worker, as a command arrives: its stream waits for the coordinator's work before it.
    pub fn command_received(&self) -> Result<(), C10dError> {
        self.commands.lock().unwrap_or_else(PoisonError::into_inner).wait()
    }

    /// The worker, before it replies: marks its stream's work so far.
    pub fn reply_sent(&self) -> Result<(), C10dError> {
        self.replies.lock().unwrap_or_else(PoisonError::into_inner).record()
    }

    /// The coordinator, as a reply arrives and before it is read: its stream waits for the
    /// replica's work before the reply.
    pub fn reply_received(&self) -> Result<(), C10dError> {
        self.replies.lock().unwrap_or_else(PoisonError::into_inner).wait()
    }
}

/// Whether `msg` comes from the worker's own loop, after the replica's work it answers for (a
/// reply handed off), rather than from autograd's thread in the middle of a backward pass (a
/// bucket, ordered by the sink's events) or from a worker that failed (nothing to order).
pub fn hands_off(msg: &FromWorker) -> bool {
    !matches!(msg, FromWorker::BucketReady { .. } | FromWorker::Failed { .. })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use dpt_sys::c10d::C10dError;

    use super::{hands_off, Handoff, OrderMark};
    use crate::engine::worker::{FromWorker, WorkerError};

    /// Two streams of one fake device, as counts of work queued on each, and what each waits
    /// for: `waited[s]` is the most of the other stream's work stream `s` has waited for.
    #[derive(Default)]
    struct Streams {
        queued: [AtomicUsize; 2],
        waited: [AtomicUsize; 2],
    }

    /// A mark recorded on stream `on` and waited for by the other one.
    struct Mark {
        streams: Arc<Streams>,
        on: usize,
        at: usize,
    }

    impl OrderMark for Mark {
        fn record(&mut self) -> Result<(), C10dError> {
            self.at = self.streams.queued[self.on].load(Ordering::SeqCst);
            Ok(())
        }
        fn wait(&self) -> Result<(), C10dError> {
            self.streams.waited[1 - self.on].fetch_max(self.at, Ordering::SeqCst);
            Ok(())
        }
    }

    const COORDINATOR: usize = 0;
    const WORKER: usize = 1;

    fn queue(streams: &Streams, on: usize, work: usize) {
        streams.queued[on].fetch_add(work, Ordering::SeqCst);
    }

    #[test]
    fn each_side_s_stream_waits_for_the_other_s_work_before_the_message_it_reads() {
        let streams = Arc::new(Streams::default());
        let mark = |on| Mark { streams: Arc::clone(&streams), on, at: 0 };
        let handoff = Handoff::with(mark(COORDINATOR), mark(WORKER));
        // The coordinator updates the replica's weights, then sends the step.
        queue(&streams, COORDINATOR, 3);
        handoff.command_sent().unwrap();
        // More of its own work after the send is not the worker's to wait for.
        queue(&streams, COORDINATOR, 5);
        handoff.command_received().unwrap();
        assert_eq!(streams.waited[WORKER].load(Ordering::SeqCst), 3, "the update before the step");
        // The forward and backward passes, then the reply.
        queue(&streams, WORKER, 7);
        handoff.reply_sent().unwrap();
        assert_eq!(streams.waited[COORDINATOR].load(Ordering::SeqCst), 0, "nothing before the reply arrives");
        handoff.reply_received().unwrap();
        assert_eq!(streams.waited[COORDINATOR].load(Ordering::SeqCst), 7, "the gradients before the sum");
        // A second command sent before the worker took the first: the worker's wait covers
        // the later point, which orders no less.
        handoff.command_sent().unwrap();
        queue(&streams, COORDINATOR, 1);
        handoff.command_sent().unwrap();
        handoff.command_received().unwrap();
        assert_eq!(streams.waited[WORKER].load(Ordering::SeqCst), 9);
    }

    #[test]
    fn replies_from_the_worker_s_loop_hand_off_and_buckets_and_failures_do_not() {
        assert!(hands_off(&FromWorker::Sampled { replica: 0, tokens: Vec::new() }));
        assert!(!hands_off(&FromWorker::BucketReady { replica: 0, bucket: 2 }));
        assert!(!hands_off(&FromWorker::Failed { replica: 0, error: WorkerError::CoordinatorGone }));
    }

    #[test]
    fn a_cpu_replica_has_no_hand_off() {
        assert!(Handoff::for_device(dpt_core::device::DeviceId::Cpu).unwrap().is_none());
        if tch::Cuda::device_count() == 0 {
            assert!(Handoff::for_device(dpt_core::device::DeviceId::Cuda(0)).is_err(), "no GPU here");
        }
    }
}
