//! The worker pool: one named thread per replica, the channels to and from them, commands
//! broadcast to all, replies gathered within a deadline (a silent replica is named as stuck),
//! and the shutdown that never hangs on a stuck thread.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use tch::Tensor;

use crate::data::Dataset;
use crate::engine::config::TrainConfig;
use crate::engine::handoff::{hands_off, Handoff};
use crate::engine::worker::{self, FromWorker, ToWorker, WorkerSetup};
use crate::engine::optim::ShardGrid;
use crate::engine::EngineError;
use dpt_core::device::DeviceId;

/// How long shutting down waits for the worker threads to leave.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// The replicas' threads and the channels to them.
pub struct WorkerPool {
    devices: Vec<DeviceId>,
    to_workers: Vec<Sender<ToWorker>>,
    /// Each GPU replica's events between its stream and the coordinator's (`engine::handoff`).
    handoffs: Vec<Option<Arc<Handoff>>>,
    from_workers: Receiver<FromWorker>,
    threads: Vec<JoinHandle<()>>,
    /// Disconnects once every worker thread has ended.
    workers_alive: Receiver<()>,
}

impl WorkerPool {
    /// Starts one worker per device of `cfg`, each from the initial tensors (shared, read-only:
    /// each worker copies them into its own buffers, and none holds them after);
    /// `first`: the global index of this process's first replica; `grid`: the flat parameter
    /// buffer's parts over the run's replicas in all its processes.
    pub fn spawn(
        cfg: &TrainConfig,
        data: &Arc<Dataset>,
        (initial_params, initial_buffers): (&Tensor, &Tensor),
        bucket_bytes: Option<(i64, i64)>,
        (first, grid): (usize, ShardGrid),
    ) -> Result<WorkerPool, EngineError> {
        let (reply_tx, from_workers) = unbounded();
        let (alive_tx, workers_alive) = crossbeam_channel::bounded::<()>(0);
        let mut to_workers = Vec::new();
        let mut handoffs = Vec::new();
        let mut threads = Vec::new();
        let decoding =
            crate::input::loader::Decoding::for_run(cfg.decoding(), data).map_err(EngineError::Spawn)?;
        let zero = cfg.settings.optimizer.zero;
        for (replica, device) in cfg.devices.iter().enumerate() {
            let (tx, rx) = unbounded();
            let handoff = Handoff::for_device(*device)?;
            let setup = WorkerSetup {
                replica,
                device: crate::device::tch_device(*device),
                model: cfg.model(),
                script: cfg.kit.script.clone(),
                loss: cfg.settings.loss(),
                task: cfg.task(),
                recipe: cfg.settings.recipe.clone(),
                eval_batch: cfg.settings.eval_batch(grid.parts),
                normalization: cfg.normalization.clone(),
                data: Arc::clone(data),
                initial_params: initial_params.shallow_clone(),
                initial_buffers: initial_buffers.shallow_clone(),
                threads: cfg.cpu_threads,
                faults: cfg.kit.faults.clone(),
                channels_last: cfg.uses_channels_last(),
                precision: cfg.settings.precision.format,
                loader: decoding.clone(),
                bucket_bytes,
                grad_shard: zero.grad_shard(grid, first + replica),
                handoff: handoff.clone(),
            };
            let replies = reply_tx.clone();
            let alive = alive_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{}{replica}", worker::WORKER_THREAD_PREFIX))
                .spawn(move || {
                    // Dropped when the thread ends, however it ends.
                    let _alive = alive;
                    worker::run(setup, rx, replies)
                })
                .map_err(EngineError::Spawn)?;
            to_workers.push(tx);
            handoffs.push(handoff);
            threads.push(handle);
        }
        Ok(WorkerPool { devices: cfg.devices.clone(), to_workers, handoffs, from_workers, threads, workers_alive })
    }

    /// Sends `cmd(replica)` to every worker, after the coordinator's work queued so far on
    /// that replica's GPU.
    pub fn broadcast(&self, cmd: impl Fn(usize) -> ToWorker) -> Result<(), EngineError> {
        for (i, tx) in self.to_workers.iter().enumerate() {
            if let Some(h) = &self.handoffs[i] {
                h.command_sent()?;
            }
            tx.send(cmd(i)).map_err(|_| EngineError::WorkersGone)?;
        }
        Ok(())
    }

    fn worker_error(&self, replica: usize, error: worker::WorkerError) -> EngineError {
        EngineError::Worker { replica, device: self.devices[replica].to_string(), error }
    }

    /// One reply from each worker, within `timeout` in all; a silent replica is reported stuck.
    pub fn gather(&self, timeout: Duration) -> Result<Vec<FromWorker>, EngineError> {
        self.gather_with(timeout, |_| Ok(()))
    }

    /// As [`WorkerPool::gather`], showing `seen` each message as it arrives: the replies, and
    /// the `BucketReady` reports that come before a step's replies (not counted as replies).
    /// The coordinator's work queued from then on, on a GPU, follows the replica's before each
    /// reply (`engine::handoff`).
    pub fn gather_with(
        &self,
        timeout: Duration,
        mut seen: impl FnMut(&FromWorker) -> Result<(), EngineError>,
    ) -> Result<Vec<FromWorker>, EngineError> {
        let k = self.devices.len();
        let deadline = Instant::now() + timeout;
        let mut replies: Vec<Option<FromWorker>> = (0..k).map(|_| None).collect();
        let mut got = 0;
        while got < k {
            match self.from_workers.recv_deadline(deadline) {
                Ok(FromWorker::Failed { replica, error }) => return Err(self.worker_error(replica, error)),
                Ok(msg) => {
                    if let Some(h) = self.handoffs[msg.replica()].as_ref().filter(|_| hands_off(&msg)) {
                        h.reply_received()?;
                    }
                    seen(&msg)?;
                    if matches!(msg, FromWorker::BucketReady { .. }) {
                        continue;
                    }
                    let r = msg.replica();
                    replies[r] = Some(msg);
                    got += 1;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let replicas: Vec<usize> = (0..k).filter(|&i| replies[i].is_none()).collect();
                    let devices = replicas.iter().map(|&r| self.devices[r].to_string()).collect();
                    return Err(EngineError::Stalled { replicas, devices, seconds: timeout.as_secs_f64() });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(EngineError::WorkersGone),
            }
        }
        Ok(replies.into_iter().flatten().collect())
    }

    /// Asks every worker to leave and joins those that do within a grace period; a stuck one is
    /// left behind (it ends with the process) rather than hanging the shutdown.
    pub fn shutdown(&mut self) {
        for tx in &self.to_workers {
            let _ = tx.send(ToWorker::Shutdown);
        }
        self.to_workers.clear();
        // Every worker holds a sender of `workers_alive`; all gone means all threads ended.
        let all_ended =
            matches!(self.workers_alive.recv_timeout(JOIN_GRACE), Err(RecvTimeoutError::Disconnected));
        for t in self.threads.drain(..) {
            if all_ended || t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
