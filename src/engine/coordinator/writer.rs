//! Periodic checkpoints written off the training thread: the coordinator queues the tensors'
//! copies to the host without waiting ([`InFlight`]) and hands them to the `dpt-checkpoint`
//! thread, which waits for them to arrive and writes them as every checkpoint is written
//! (atomically, made durable) while training goes on. One write is in flight at most: a checkpoint due while the
//! previous one is still being written waits for it. The final save never goes through here.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use crate::engine::checkpoint_every::CheckpointEvery;
use super::snapshot::InFlight;
use crate::device::gpu_wait::Waiting;
use crate::persist::checkpoint::CheckpointError;
use crate::record::Change;

/// The periodic checkpoints: their cadence (`checkpoints.every`), how many are kept
/// (`checkpoints.keep`), and the writer thread, started with the first.
pub struct Periodic {
    every: CheckpointEvery,
    keep: usize,
    writer: Option<CheckpointWriter>,
    /// When the last periodic checkpoint was written (or the run started).
    last: Instant,
}

impl Periodic {
    pub fn new(every: CheckpointEvery, keep: usize) -> Periodic {
        Periodic { every, keep, writer: None, last: Instant::now() }
    }

    /// The step checkpoints kept on disk.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Whether the checkpoints are due by a clock (`--checkpoint-every 20m`), which only rank
    /// 0's can say, rather than by steps or epochs, which every rank counts alike.
    pub fn by_clock(&self) -> bool {
        matches!(self.every, CheckpointEvery::Time(t) if !t.is_zero())
    }

    /// Whether one is due after the step that made `global_step` steps (`epoch_end`: the
    /// 1-based epoch that step ended); when it is, its clock starts again.
    pub fn due(&mut self, global_step: usize, epoch_end: Option<usize>) -> bool {
        let due = self.every.due(global_step, epoch_end, self.last.elapsed());
        if due {
            self.last = Instant::now();
        }
        due
    }

    /// Hands `checkpoint` to the writer thread to write at `path`; the records of the writes
    /// that ended meanwhile, or a warning when the thread cannot start.
    pub fn submit(&mut self, checkpoint: InFlight, path: PathBuf, waiting: Waiting) -> Vec<Change> {
        if self.writer.is_none() {
            match CheckpointWriter::spawn() {
                Ok(w) => self.writer = Some(w),
                Err(e) => {
                    return vec![Change::Warning { message: format!("cannot start the checkpoint thread: {e}") }]
                }
            }
        }
        let global_step = checkpoint.global_step();
        let job = Job { checkpoint, waiting, path, global_step, keep: self.keep };
        written(self.writer.as_mut().map(|w| w.submit(job)).unwrap_or_default())
    }

    /// How the writes that have ended went; `wait`: first waits for the one in flight.
    pub fn note_written(&mut self, wait: bool) -> Vec<Change> {
        match self.writer.as_mut() {
            Some(w) if wait => written(w.wait()),
            Some(w) => written(w.finished()),
            None => Vec::new(),
        }
    }
}

/// The records of checkpoint writes that have ended.
fn written(finished: Vec<Written>) -> Vec<Change> {
    finished
        .into_iter()
        .map(|w| match w.result {
            Ok(path) => Change::Checkpointed { path: path.display().to_string(), global_step: w.global_step },
            Err(e) => Change::Warning { message: crate::error_chain(&e) },
        })
        .collect()
}

/// A checkpoint to write at `path` once it has arrived on the host (`waiting` for it), keeping
/// the `keep` newest under `checkpoints/`.
pub struct Job {
    pub checkpoint: InFlight,
    pub waiting: Waiting,
    pub path: PathBuf,
    pub global_step: usize,
    pub keep: usize,
}

/// How a write ended.
pub struct Written {
    pub global_step: usize,
    pub result: Result<PathBuf, CheckpointError>,
}

pub struct CheckpointWriter {
    jobs: Option<Sender<Job>>,
    done: Receiver<Written>,
    in_flight: bool,
    thread: Option<JoinHandle<()>>,
}

impl CheckpointWriter {
    pub fn spawn() -> std::io::Result<Self> {
        let (jobs, work) = bounded::<Job>(1);
        let (tell, done) = unbounded();
        let thread = std::thread::Builder::new().name("dpt-checkpoint".into()).spawn(move || {
            crate::device::intra_op::keep_to_one_thread();
            for job in work {
                let result = write_arrived(job.checkpoint, &job.waiting, &job.path).map(|()| {
                    keep_newest(&job.path, job.global_step, job.keep);
                    job.path.clone()
                });
                if tell.send(Written { global_step: job.global_step, result }).is_err() {
                    return;
                }
            }
        })?;
        Ok(CheckpointWriter { jobs: Some(jobs), done, in_flight: false, thread: Some(thread) })
    }

    /// Hands `job` over, after the write in flight (returned, if any) has ended.
    pub fn submit(&mut self, job: Job) -> Vec<Written> {
        let finished = self.wait();
        if let Some(jobs) = &self.jobs {
            self.in_flight = jobs.send(job).is_ok();
        }
        finished
    }

    /// The write that has ended since the last look, without waiting.
    pub fn finished(&mut self) -> Vec<Written> {
        let out: Vec<Written> = self.done.try_iter().collect();
        if !out.is_empty() {
            self.in_flight = false;
        }
        out
    }

    /// Waits for the write in flight, if any.
    pub fn wait(&mut self) -> Vec<Written> {
        if !std::mem::take(&mut self.in_flight) {
            return self.done.try_iter().collect();
        }
        self.done.recv().into_iter().collect()
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes `checkpoint` at `path` once it has arrived on the host; not where the weights were
/// not finite, or it did not arrive.
fn write_arrived(checkpoint: InFlight, waiting: &Waiting, path: &Path) -> Result<(), CheckpointError> {
    match checkpoint.arrive(waiting) {
        Ok(Some(arrived)) => arrived.write(path),
        Ok(None) => Err(CheckpointError::NotFinite { path: path.to_owned() }),
        Err(e) => Err(CheckpointError::Write { path: path.to_owned(), cause: std::io::Error::other(e) }),
    }
}

/// With `keep` > 1, links the checkpoint just written at `path` into `checkpoints/` beside it
/// as `step-<global_step>.safetensors` and removes all but the `keep` newest there. Best effort:
/// the checkpoint itself is written already.
pub fn keep_newest(path: &Path, global_step: usize, keep: usize) {
    let Some(dir) = path.parent().map(|d| d.join("checkpoints")) else { return };
    if keep <= 1 || std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let kept = dir.join(format!("step-{global_step:09}.safetensors"));
    let _ = std::fs::remove_file(&kept);
    if std::fs::hard_link(path, &kept).is_err() {
        let _ = crate::atomic::write_with(&kept, |tmp| std::fs::copy(path, tmp).map(drop));
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|r| r.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    all.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("step-")));
    all.sort();
    for old in all.iter().rev().skip(keep) {
        let _ = std::fs::remove_file(old);
    }
}
