//! Where a replica's gradients go as the backward pass makes them, when the allreduce overlaps
//! the backward pass: a hook on each trainable parameter writes its gradient into the flat
//! gradient buffer at once (copied on a step's first micro-batch, added on the others) and, on
//! the step's last micro-batch, tells the coordinator each bucket whose gradients are all in.
//! It also records the order the first micro-batch's gradients arrive in, from which the
//! coordinator re-plans the buckets once (see `engine::buckets`).
//!
//! Under `--zero 2` a replica has no whole gradient buffer: each bucket gets a buffer of its
//! own when the step's first gradient of it arrives, held only until the coordinator has reduced
//! it and kept the replica's shard of the sum ([`GradSink::release`]); how many exist at once,
//! and which are kept for the next bucket, is the [`BucketPool`]'s. A gradient the
//! sink has written goes on through the backward pass as a one-element stand-in
//! ([`Handled::Kept`]), so the backward pass does not hold a second copy of it either.

use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use tch::Tensor;

use super::bucket_pool::BucketPool;
use super::buckets::Buckets;
use super::worker_messages::FromWorker;
use super::bucket_events::BucketEvents;
use dpt_sys::c10d::Handled;

/// Where the hooks write each trainable parameter's gradient.
pub enum Destination {
    /// Views of the replica's flat gradient buffer, one per trainable parameter.
    Views(Vec<Tensor>),
    /// Each bucket's own buffer, made on `device` when needed (`--zero 2`); `forms`: each
    /// trainable parameter's shape and strides in the flat buffer, kept in the bucket's.
    Buckets { forms: Vec<(Vec<i64>, Vec<i64>)>, device: tch::Device },
}

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
    /// Where the gradients go.
    destination: Destination,
    /// Under [`Destination::Buckets`], each bucket's buffer of this step, once taken (a
    /// buffer of the pool, at least the bucket's length).
    staged: Vec<Option<Tensor>>,
    /// Released bucket buffers, for the step's next buckets to take.
    pool: BucketPool,
    /// Which parameters' hooks wrote during the current micro-batch.
    written: Vec<bool>,
    /// Whether the current micro-batch adds to the earlier ones' gradients.
    adding: bool,
    /// Whether the current micro-batch is the step's last (its buckets are then reported).
    last: bool,
    /// Per bucket, the parameters not yet written in the last micro-batch.
    left: Vec<usize>,
    /// On a GPU, per bucket, an event per stream its gradients were written on, recorded once
    /// the bucket is complete (see [`GradSink::hand_off`]).
    events: BucketEvents,
    /// Counts the steps (their last micro-batches): which events this step recorded.
    step: u64,
}

impl GradSink {
    /// Hooks every one of `leaves` (the trainable parameters, whose gradients go to
    /// `destination`), reporting to the coordinator through `replies`.
    pub fn hook(
        replica: usize,
        leaves: &[&Tensor],
        destination: Destination,
        buckets: Arc<Buckets>,
        replies: Sender<FromWorker>,
    ) -> Result<Arc<GradSink>, dpt_sys::c10d::C10dError> {
        let state = State {
            arrival: Vec::with_capacity(leaves.len()),
            recording: true,
            destination,
            staged: (0..buckets.len()).map(|_| None).collect(),
            pool: BucketPool::default(),
            written: vec![false; leaves.len()],
            adding: false,
            last: false,
            left: vec![0; buckets.len()],
            events: BucketEvents::new(buckets.len()),
            step: 0,
            buckets,
        };
        let sink = Arc::new(GradSink { replica, replies, state: Mutex::new(state) });
        for (k, leaf) in leaves.iter().enumerate() {
            // The hook holds the sink weakly: the sink owns the views, the leaves own the hooks.
            let weak = Arc::downgrade(&sink);
            dpt_sys::c10d::on_grad(leaf, move |grad| match weak.upgrade() {
                Some(sink) => sink.take(k, &grad),
                None => Ok(Handled::PassOn),
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
    pub fn rebucket(&self, buckets: Arc<Buckets>) -> Result<(), dpt_sys::c10d::C10dError> {
        let mut s = self.lock();
        s.left = vec![0; buckets.len()];
        s.events = BucketEvents::new(buckets.len());
        let held: Vec<Tensor> = s.staged.iter_mut().filter_map(Option::take).collect();
        s.staged = (0..buckets.len()).map(|_| None).collect();
        s.buckets = buckets;
        held.into_iter().try_for_each(|t| s.pool.give_back(t))
    }

    /// Under `--zero 2`, bucket `b`'s buffer of this step (made of zeros if no gradient of it
    /// came: an empty shard of the batch); `None` when the gradients go to the flat buffer.
    /// The coordinator asks only once the bucket is reported, when no hook writes it.
    pub fn staged(&self, b: usize) -> Result<Option<Tensor>, tch::TchError> {
        let mut s = self.lock();
        if matches!(s.destination, Destination::Views(_)) {
            return Ok(None);
        }
        s.bucket_buffer(b).map(Some)
    }

    /// Whether bucket `b` has its buffer this step (a gradient of it came).
    pub fn holds(&self, b: usize) -> bool {
        self.lock().staged.get(b).is_some_and(Option::is_some)
    }

    /// The step's reduction is over: the pool frees the buffers it kept (the next forward
    /// pass has their memory).
    pub fn end_step(&self) {
        self.lock().pool.end_step();
    }

    /// Gives bucket `b`'s buffer back to the pool, once the coordinator has kept what it needs
    /// of it (the next bucket the backward pass starts takes it).
    pub fn release(&self, b: usize) -> Result<(), dpt_sys::c10d::C10dError> {
        let mut s = self.lock();
        match s.staged.get_mut(b).and_then(Option::take) {
            Some(t) => s.pool.give_back(t),
            None => Ok(()),
        }
    }

    /// Writes trainable parameter `k`'s gradient `grad` (copied on the step's first
    /// micro-batch, added on the others) unless its hook did during this micro-batch: the
    /// worker's call for the gradients the backward pass returned without a hook seeing them
    /// (an undefined one, of a parameter the pass did not reach, writes zeros).
    pub fn fill(&self, k: usize, grad: &Tensor) -> Result<(), tch::TchError> {
        let _guard = tch::no_grad_guard();
        let mut s = self.lock();
        if s.written.get(k).copied().unwrap_or(true) {
            return Ok(());
        }
        s.write(k, grad)?;
        // On a GPU, the bucket's hand-off waits for this write as for a hook's (recorded when
        // the worker settles the backward pass).
        if let (true, Some(b), tch::Device::Cuda(i)) = (s.last, s.buckets.of(k), s.device(k)) {
            s.mark(b, i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        Ok(())
    }

    /// Orders the calling thread's current stream after the writes of bucket `b`'s gradients,
    /// before it reads them: the hooks run on the stream of the backward kernel that made each
    /// gradient (autograd's), which is the replica's (or, for a model that runs part of its
    /// forward on a stream of its own, that one), never the coordinator's, and a bucket's
    /// gradients may come from several. A wait on the device for each stream's event, recorded
    /// on that stream when the bucket's last gradient came (`engine::bucket_events`): the
    /// reading stream does not wait for the backward kernels queued after it. Nothing on the
    /// CPU. The other direction (a later step's hook writing after this step's update on the
    /// coordinator's stream) holds by the hand-off that orders the replica's stream after the
    /// coordinator's before each step (`engine::handoff`), and for a model's own stream because
    /// it must wait for the replica's before its forward pass reads the weights, as PyTorch
    /// requires of any model that uses a stream of its own.
    pub fn hand_off(&self, b: usize) -> Result<(), dpt_sys::c10d::C10dError> {
        let s = self.lock();
        match b < s.buckets.len() {
            true => s.events.wait(b, s.step),
            false => Ok(()),
        }
    }

    /// The replica's backward pass is over (the worker's call, after its last micro-batch's
    /// gradients the hooks did not see are written): on a GPU, the events of the buckets no hook
    /// completed are recorded.
    pub fn settle(&self) -> Result<(), dpt_sys::c10d::C10dError> {
        let mut s = self.lock();
        let step = s.step;
        s.events.seal_all(step)
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

    /// The hook: parameter `k`'s gradient is `grad`.
    fn take(&self, k: usize, grad: &Tensor) -> Result<Handled, tch::TchError> {
        let _guard = tch::no_grad_guard();
        let mut s = self.lock();
        if s.recording && !s.written[k] {
            s.arrival.push(k);
        }
        s.write(k, grad)?;
        if !s.last {
            return Ok(Handled::Kept);
        }
        let Some(b) = s.buckets.of(k) else { return Ok(Handled::Kept) };
        if let tch::Device::Cuda(i) = grad.device() {
            s.mark(b, i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        s.left[b] = s.left[b].saturating_sub(1);
        if s.left[b] == 0 {
            let step = s.step;
            s.events.seal(b, step).map_err(|e| tch::TchError::Torch(e.0))?;
            // A gone coordinator is noticed by the worker's next send.
            let _ = self.replies.send(FromWorker::BucketReady { replica: self.replica, bucket: b });
        }
        Ok(Handled::Kept)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Writes parameter `k`'s gradient to its destination (copied or added, by the
    /// micro-batch); an undefined `grad` is a zero gradient.
    fn write(&mut self, k: usize, grad: &Tensor) -> Result<(), tch::TchError> {
        let adding = self.adding;
        let mut dest = match &self.destination {
            Destination::Views(views) => views[k].shallow_clone(),
            Destination::Buckets { forms, .. } => {
                let (shape, strides) = forms[k].clone();
                let Some((b, at, _)) = self.buckets.place(k) else {
                    self.written[k] = true;
                    return Ok(());
                };
                // The bucket's buffer is a storage of its own, starting at its start.
                self.bucket_buffer(b)?.f_as_strided(shape.as_slice(), strides.as_slice(), at)?
            }
        };
        match (grad.defined(), adding) {
            (false, true) => {}
            (false, false) => drop(dest.f_zero_()?),
            (true, true) => drop(dest.f_add_(grad)?),
            (true, false) => dest.f_copy_(grad)?,
        }
        self.written[k] = true;
        Ok(())
    }

    /// Where parameter `k`'s gradient is written.
    fn device(&self, k: usize) -> tch::Device {
        match &self.destination {
            Destination::Views(views) => views[k].device(),
            Destination::Buckets { device, .. } => *device,
        }
    }

    /// Bucket `b`'s buffer of this step, made of zeros the first time it is asked for.
    fn bucket_buffer(&mut self, b: usize) -> Result<Tensor, tch::TchError> {
        let Destination::Buckets { device, .. } = self.destination else {
            return Err(tch::TchError::Torch(
                "gradients go to the flat buffer, not to bucket buffers".into(),
            ));
        };
        let len = self.buckets.ranges[b].len;
        if let Some(t) = &self.staged[b] {
            return t.f_narrow(0, 0, len);
        }
        let buffer = self.pool.take(len, device)?;
        let mut view = buffer.f_narrow(0, 0, len)?;
        let _ = view.f_zero_()?;
        self.staged[b] = Some(buffer);
        Ok(view)
    }

    /// Notes a write of one of bucket `b`'s gradients on the calling thread's current stream on
    /// CUDA device `device` (its event is recorded once the bucket is complete).
    fn mark(&mut self, b: usize, device: usize) -> Result<(), dpt_sys::c10d::C10dError> {
        let stream = dpt_sys::c10d::current_stream(device)?;
        self.events.wrote(b, (device, stream))
    }
}
