//! Where a replica's gradients go as the backward pass makes them, when the allreduce overlaps
//! the backward pass: a hook on each trainable parameter writes its gradient into the flat
//! gradient buffer at once (copied on a step's first micro-batch, added on the others) and, on
//! the step's last micro-batch, tells the coordinator each bucket whose gradients are all in.
//! It also records the order the first micro-batch's gradients arrive in, from which the
//! coordinator re-plans the buckets once (see `engine::buckets`).

use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use tch::Tensor;

use super::buckets::Buckets;
use super::worker_messages::FromWorker;
use dpt_sys::c10d::CudaEvent;

/// One replica's hooks' shared state.
pub struct GradSink {
    replica: usize,
    replies: Sender<FromWorker>,
    state: Mutex<State>,
}

struct State {
    /// The buckets reported (replaced once, between steps, by [`GradSink::rebucket`]).
    buckets: Arc<Buckets>,
    /// The trainable parameters in the order their gradients first arrived, while recording
    /// (the first micro-batch after the hooks were set).
    arrival: Vec<usize>,
    recording: bool,
    /// The gradient views of the trainable parameters (the hooks' destinations).
    views: Vec<Tensor>,
    /// Which parameters' hooks wrote during the current micro-batch.
    written: Vec<bool>,
    /// Whether the current micro-batch adds to the earlier ones' gradients.
    adding: bool,
    /// Whether the current micro-batch is the step's last (its buckets are then reported).
    last: bool,
    /// Per bucket, the parameters not yet written in the last micro-batch.
    left: Vec<usize>,
    /// On a GPU, per bucket, an event per stream its hooks ran on, recorded after each of their
    /// writes there (see [`GradSink::hand_off`]); made once and kept for the run.
    handed: Vec<Vec<Handed>>,
    /// Counts the steps (their last micro-batches): which events this step recorded.
    step: u64,
}

/// A bucket's event on one stream.
struct Handed {
    stream: i64,
    event: CudaEvent,
    /// The step that last recorded it.
    step: u64,
}

impl GradSink {
    /// Hooks every one of `leaves` (the trainable parameters, paired with their gradient
    /// `views`), reporting to the coordinator through `replies`.
    pub fn hook(
        replica: usize,
        leaves: &[&Tensor],
        views: &[Tensor],
        buckets: Arc<Buckets>,
        replies: Sender<FromWorker>,
    ) -> Result<Arc<GradSink>, dpt_sys::c10d::C10dError> {
        let state = State {
            arrival: Vec::with_capacity(views.len()),
            recording: true,
            views: views.iter().map(Tensor::shallow_clone).collect(),
            written: vec![false; views.len()],
            adding: false,
            last: false,
            left: vec![0; buckets.len()],
            handed: (0..buckets.len()).map(|_| Vec::new()).collect(),
            step: 0,
            buckets,
        };
        let sink = Arc::new(GradSink { replica, replies, state: Mutex::new(state) });
        for (k, leaf) in leaves.iter().enumerate() {
            // The hook holds the sink weakly: the sink owns the views, the leaves own the hooks.
            let weak = Arc::downgrade(&sink);
            dpt_sys::c10d::on_grad(leaf, move |grad| match weak.upgrade() {
                Some(sink) => sink.take(k, &grad),
                None => Ok(()),
            })?;
        }
        Ok(sink)
    }

    /// The buckets this sink reports.
    pub fn buckets(&self) -> Arc<Buckets> {
        Arc::clone(&self.lock().buckets)
    }

    /// The trainable parameters in the order their gradients arrived in the first micro-batch
    /// (empty before it).
    pub fn arrival(&self) -> Vec<usize> {
        self.lock().arrival.clone()
    }

    /// Reports `buckets` from the next micro-batch on; call only between steps (the coordinator
    /// does, between the replica's `StepDone` and its next `Step`).
    pub fn rebucket(&self, buckets: Arc<Buckets>) {
        let mut s = self.lock();
        s.left = vec![0; buckets.len()];
        s.handed = (0..buckets.len()).map(|_| Vec::new()).collect();
        s.buckets = buckets;
    }

    /// Orders the calling thread's current stream after the writes of bucket `b`'s gradients,
    /// before it reads them: the hooks run on the stream of the backward kernel that made each
    /// gradient (autograd's), which for a model that runs part of its forward on a stream of
    /// its own is not the coordinator's, and a bucket's gradients may come from several. A
    /// wait on the device for each stream's event, recorded just after that stream's last write
    /// of the bucket: the reading stream does not wait for the backward kernels queued after
    /// them. Nothing on the CPU. The other direction (a later step's hook on such a stream
    /// writing after this step's update on the default stream) holds because such a model's
    /// stream must wait for the default stream before its forward pass reads the weights, as
    /// PyTorch requires of any model that uses a stream of its own.
    pub fn hand_off(&self, b: usize) -> Result<(), dpt_sys::c10d::C10dError> {
        let s = self.lock();
        let step = s.step;
        for h in s.handed.get(b).into_iter().flatten().filter(|h| h.step == step) {
            h.event.block()?;
        }
        Ok(())
    }

    /// Starts a micro-batch: the first of a step copies, the others add; the last reports.
    pub fn begin(&self, first: bool, last: bool) {
        let mut s = self.lock();
        // The order is the first micro-batch's that made any gradient.
        s.recording &= s.arrival.is_empty();
        s.written.iter_mut().for_each(|w| *w = false);
        s.adding = !first;
        s.last = last;
        if last {
            s.step += 1;
            let sizes: Vec<usize> = (0..s.buckets.len()).map(|b| s.buckets.params_in(b)).collect();
            s.left = sizes;
        }
    }

    /// Whether trainable parameter `k`'s hook wrote during the current micro-batch (one whose
    /// gradient the backward pass did not compute was not: the caller writes it).
    pub fn wrote(&self, k: usize) -> bool {
        self.lock().written.get(k).copied().unwrap_or(false)
    }

    /// The hook: parameter `k`'s gradient is `grad`.
    fn take(&self, k: usize, grad: &Tensor) -> Result<(), tch::TchError> {
        let _guard = tch::no_grad_guard();
        let mut s = self.lock();
        let adding = s.adding;
        let view = &mut s.views[k];
        let done = if adding { view.f_add_(grad).map(drop) } else { view.f_copy_(grad) };
        done?;
        if s.recording && !s.written[k] {
            s.arrival.push(k);
        }
        s.written[k] = true;
        if !s.last {
            return Ok(());
        }
        let Some(b) = s.buckets.of(k) else { return Ok(()) };
        if let tch::Device::Cuda(i) = grad.device() {
            s.mark(b, i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        s.left[b] = s.left[b].saturating_sub(1);
        if s.left[b] == 0 {
            // A gone coordinator is noticed by the worker's next send.
            let _ = self.replies.send(FromWorker::BucketReady { replica: self.replica, bucket: b });
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Records bucket `b`'s event for the calling thread's current stream on CUDA device
    /// `device`, just after a write of one of its gradients there (an event made the first time
    /// the bucket meets that stream, then kept).
    fn mark(&mut self, b: usize, device: usize) -> Result<(), dpt_sys::c10d::C10dError> {
        let stream = dpt_sys::c10d::current_stream(device)?;
        let step = self.step;
        let handed = &mut self.handed[b];
        let at = match handed.iter().position(|h| h.stream == stream) {
            Some(at) => at,
            None => {
                handed.push(Handed { stream, event: CudaEvent::ordering(device)?, step });
                handed.len() - 1
            }
        };
        handed[at].event.record()?;
        handed[at].step = step;
        Ok(())
    }
}
