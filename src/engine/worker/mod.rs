//! One worker thread per replica: owns the model copy on its device and its batches (resident
//! or streamed, `input::batches`), and runs forward and backward on the shard the coordinator
//! assigns, the evaluation of its share of the test set (`evaluate`) and a language model's
//! sample (`sample`). What it exchanges with the coordinator is in `worker_messages.rs`.

mod evaluate;
mod graphed;
mod sample;
mod step;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use tch::{Device, Kind, Tensor};

pub use super::worker_thread::{in_worker_thread, panic_message, WORKER_THREAD_PREFIX};

use super::buckets::Buckets;
use super::clock::PhaseClock;
use super::faults::Faults;
use super::flat::FlatTensors;
use super::grad_sink::{Destination, GradSink};
use super::loss::{Objective, Scored};
use crate::device::late_read::LateRead;
use crate::input::batches::{BatchSpec, Batches};
use crate::model::script::ScriptNet;
use crate::model::{Builder, Forward, Network, Precision};
use dpt_core::tally::Tally;
use dpt_sys::c10d::{OwnRng, OwnStream};

pub use super::worker_messages::{
    FromWorker, LossFactor, ReplicaHandles, StepGraph, ToWorker, WindowSums, WorkerError, WorkerSetup,
};

struct Worker {
    replica: usize,
    device: Device,
    net: Box<dyn Network>,
    objective: Objective,
    label_smoothing: f64,
    accumulate: usize,
    params: FlatTensors,
    grads: Tensor,
    /// Gradient views of the trainable parameters, in the order of `trainable`.
    grad_views: Vec<Tensor>,
    /// The indices of the parameters that train (not frozen).
    trainable: Vec<usize>,
    /// Where the hooks put each gradient as the backward pass makes it, when the allreduce
    /// overlaps the backward pass.
    sink: Option<Arc<GradSink>>,
    precision: Precision,
    buffers: FlatTensors,
    batches: Batches,
    faults: Faults,
    clock: PhaseClock,
    loss_sum: Tensor,
    correct: Tensor,
    samples: f64,
    /// The FLOPs of one sample's forward pass, once counted (on the first step with samples).
    flops_per_sample: Option<f64>,
    /// The replica's captured step (`--cuda-graphs`), once captured.
    graph: Option<graphed::Graphed>,
}

/// Runs one worker until `Shutdown`, a closed channel or a failure (reported, never propagated
/// as a panic).
pub fn run(setup: WorkerSetup, commands: Receiver<ToWorker>, replies: Sender<FromWorker>) {
    let replica = setup.replica;
    let handoff = setup.handoff.clone();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(), WorkerError> {
        // The replica's work, its buffers' allocation first, goes on a stream of its own.
        let _stream = match setup.device {
            Device::Cuda(i) => {
                // Before anything else, as DDP scripts call torch.cuda.set_device(local_rank).
                dpt_sys::c10d::set_thread_device(i)?;
                Some(OwnStream::enter(i)?)
            }
            _ => None,
        };
        // c10's warning handler is per thread: this thread's syncs (and its backward passes',
        // replayed here) are counted under DPT_SYNC_DEBUG.
        dpt_sys::c10d::count_syncs_here()?;
        let mut worker = Worker::new(setup, &replies)?;
        let reply = |msg| -> Result<(), WorkerError> {
            if let Some(h) = &handoff {
                h.reply_sent()?;
            }
            replies.send(msg).map_err(|_| WorkerError::CoordinatorGone)
        };
        reply(FromWorker::Ready { replica, handles: Box::new(worker.handles()) })?;
        for cmd in commands {
            if let Some(h) = &handoff {
                h.command_received()?;
            }
            let msg = match cmd {
                ToWorker::Epoch { order, epoch, steps } => {
                    worker.batches.start_epoch(epoch, order, steps)?;
                    continue;
                }
                ToWorker::Step { start, len, global_step, dropout_seed, timed, loss_factor, graph } => {
                    worker.inject_faults(global_step);
                    if worker.faults.worker_oom == Some((replica, global_step)) {
                        return Err(WorkerError::InjectedOom);
                    }
                    worker.step(step::StepAsk { start, len, global_step, loss_factor, dropout_seed, timed, graph })?
                }
                ToWorker::Report => FromWorker::Sums { replica, sums: worker.take_sums()? },
                ToWorker::Evaluate { start, len, val } => worker.evaluate(start, len, val)?,
                ToWorker::Sample { prompt, tokens, context, seed } => {
                    FromWorker::Sampled { replica, tokens: worker.sample(&prompt, tokens, context, seed)? }
                }
                ToWorker::Shutdown => break,
            };
            if let Err(e) = reply(msg) {
                return match e {
                    WorkerError::CoordinatorGone => Ok(()),
                    e => Err(e),
                };
            }
        }
        Ok(())
    }));
    let error = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(panic) => WorkerError::Panic(panic_message(panic.as_ref())),
    };
    // The coordinator may already be gone; nothing more to do then.
    let _ = replies.send(FromWorker::Failed { replica, error });
}

impl Worker {
    fn new(setup: WorkerSetup, replies: &Sender<FromWorker>) -> Result<Self, WorkerError> {
        if setup.device == Device::Cpu {
            crate::device::intra_op::set_for_this_thread(setup.threads);
        }
        let mut builder = Builder::default();
        let mut net: Box<dyn Network> = match (&setup.script, crate::model::build(setup.model, &mut builder))
        {
            (_, Some(net)) => net,
            (Some(script), None) => {
                builder = crate::model::specs(setup.model, Some(script));
                Box::new(ScriptNet::load(script, setup.device)?)
            }
            (None, None) => return Err(WorkerError::NoScript),
        };
        let mut params = FlatTensors::zeros(&builder.params, setup.device, true, setup.channels_last);
        let buffers = FlatTensors::zeros(&builder.buffers, setup.device, false, false);
        {
            let _guard = tch::no_grad_guard();
            params.layout.load_logical(&params.flat, &setup.initial_params);
            buffers.layout.load_logical(&buffers.flat, &setup.initial_buffers);
        }
        // A module that owns its tensors now works on the flat buffers' storage.
        if let Some(own) = net.adopt(&params.views, &buffers.views) {
            params.views = own;
        }
        // Gradient views laid out like the parameters, so the flat update pairs them up; the
        // frozen parameters' stay zero and are left out of the backward pass. Under --zero 2
        // the buffer is this replica's shard of the sums, which the coordinator writes.
        let trainable: Vec<usize> =
            (0..builder.params.len()).filter(|&i| !builder.params[i].frozen).collect();
        let (grads, grad_views) = match setup.grad_shard {
            Some(shard) => (Tensor::zeros([shard.len], (Kind::Float, setup.device)), Vec::new()),
            None => {
                let grads = Tensor::zeros([params.numel()], (Kind::Float, setup.device));
                let all = params.layout.views(&grads);
                let views = trainable.iter().map(|&i| all[i].shallow_clone()).collect();
                (grads, views)
            }
        };
        let sink = match setup.bucket_bytes {
            Some((first, cap)) => {
                let segments: Vec<(i64, i64)> = params.layout.segments().map(|(o, n, _)| (o, n)).collect();
                let buckets = Arc::new(Buckets::plan(&segments, &trainable, first, cap));
                let leaves: Vec<&Tensor> = trainable.iter().map(|&i| &params.views[i]).collect();
                let destination = match setup.grad_shard {
                    Some(_) => Destination::Buckets {
                        forms: trainable.iter().map(|&i| params.layout.form(i)).collect(),
                        device: setup.device,
                    },
                    None => Destination::Views(grad_views.iter().map(Tensor::shallow_clone).collect()),
                };
                Some(GradSink::hook(setup.replica, &leaves, destination, buckets, replies.clone())?)
            }
            None if setup.grad_shard.is_some() => return Err(WorkerError::ShardWithoutBuckets),
            None => None,
        };
        let acc = |kind| Tensor::zeros([], (kind, setup.device));
        let batches = Batches::new(&BatchSpec {
            replica: setup.replica,
            device: setup.device,
            data: Arc::clone(&setup.data),
            loader: setup.loader.clone(),
            eval_batch: setup.eval_batch,
            augment: setup.recipe.augmentation(),
            seed: setup.recipe.seed,
            normalization: setup.normalization.clone(),
        })?;
        Ok(Worker {
            replica: setup.replica,
            device: setup.device,
            net,
            objective: Objective { task: setup.task, kind: setup.loss },
            label_smoothing: setup.recipe.label_smoothing,
            accumulate: setup.recipe.accumulate.max(1),
            batches,
            params,
            grads,
            grad_views,
            trainable,
            sink,
            precision: setup.precision,
            buffers,
            faults: setup.faults.clone(),
            clock: PhaseClock::new(setup.device, 2),
            loss_sum: acc(Kind::Double),
            correct: acc(Kind::Int64),
            samples: 0.0,
            flops_per_sample: None,
            graph: None,
        })
    }

    fn handles(&self) -> ReplicaHandles {
        let shallow =
            |f: &FlatTensors| f.names.iter().cloned().zip(f.views.iter().map(Tensor::detach)).collect();
        ReplicaHandles {
            params: self.params.flat.shallow_clone(),
            grads: self.grads.shallow_clone(),
            buffers: self.buffers.flat.shallow_clone(),
            named_params: shallow(&self.params),
            named_buffers: shallow(&self.buffers),
            sink: self.sink.clone(),
        }
    }

    /// The summed loss of the batch `(x, y)` (and the outputs, for class labels).
    fn score(&self, x: &Tensor, y: &Tensor, ctx: &Forward, smoothing: f64) -> Result<Scored, WorkerError> {
        let tensors = (self.params.views.as_slice(), self.buffers.views.as_slice());
        Ok(self.objective.score(self.net.as_ref(), tensors, (x, y), ctx, smoothing)?)
    }

    fn dropout_masks(&self, n: i64, seed: i64) -> Result<Vec<Tensor>, WorkerError> {
        let specs = self.net.dropout_masks(n);
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        let _own = OwnRng::open(seed, self.device)?;
        Ok(specs
            .into_iter()
            .map(|(shape, p)| {
                Tensor::empty(shape.as_slice(), (Kind::Float, self.device)).bernoulli_float_(1.0 - p)
                    / (1.0 - p)
            })
            .collect())
    }

    fn inject_faults(&self, global_step: usize) {
        if self.faults.worker_panic == Some((self.replica, global_step)) {
            panic!("injected fault: replica {} panics at step {global_step}", self.replica);
        }
        if self.faults.worker_stall == Some((self.replica, global_step)) {
            // Stands in for a hung kernel or driver: the thread never answers again.
            let (_keep, never) = crossbeam_channel::bounded::<()>(0);
            let _ = never.recv();
        }
    }

    /// The loss the backward pass starts from when it is scaled (`None`: the loss itself).
    fn scaled(&self, loss: &Tensor, factor: &LossFactor, global_step: usize) -> Tensor {
        match self.faults.grad_overflow.contains(&(self.replica, global_step)) {
            true => loss * f64::INFINITY,
            false => factor.apply(loss),
        }
    }

    /// The window's sums, copied where they are (on a GPU, without waiting for the device:
    /// the coordinator reads them a window later), and the accumulators zeroed behind the copy.
    fn take_sums(&mut self) -> Result<WindowSums, WorkerError> {
        // One copy of both sums; a count of correct predictions is exact in f64.
        let both = Tensor::f_stack(&[self.loss_sum.f_to_kind(Kind::Double)?, self.correct.f_to_kind(Kind::Double)?], 0)?;
        let values = LateRead::start(&both)?;
        let sums = WindowSums { values, samples: self.samples };
        let _ = self.loss_sum.zero_();
        let _ = self.correct.zero_();
        self.samples = 0.0;
        Ok(sums)
    }
}
