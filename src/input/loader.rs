//! The streaming loader (`--loader stream`): one `dpt-loader-R` thread per replica works
//! through the batches its replica will ask for next (this epoch's shard of every step, or an
//! evaluation range), decodes each batch's images on the process's pool of decode threads,
//! and hands it over through a queue of at most `prefetch` ready batches, in pinned host memory
//! when the replica is a GPU. Memory thus stays at `prefetch + 1` batches per replica whatever
//! the data set's size. The order is the coordinator's (a pure function of seed and epoch), so
//! a streamed run trains on exactly the batches a resident one does, and resumes as exactly.

use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender, TryRecvError};
use rayon::prelude::*;
use tch::{Device, Tensor};

use super::augment::{self, Augment};
use super::resized_crop;
use crate::data::stream::{Fit, SampleError, Streamed};
use crate::data::{Dataset, Pixels, Split};
use crate::device::intra_op::ShortSpin;
use dpt_sys::c10d::host::filled_bytes;

pub use super::bad_images::BadImages;

/// Why a batch could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("{count} different images failed to decode while training, more than the {allowed} allowed (--max-bad-images {fraction}); the last: {last}")]
    TooManyBad { count: usize, allowed: usize, fraction: f64, last: String },
    #[error("the loader thread is gone")]
    Gone,
    #[error("the loader gave rows {got} where rows {want} were due")]
    OutOfStep { got: usize, want: usize },
    #[error("the {0} split is not streamed")]
    NotStreamed(&'static str),
    #[error("cannot allocate a batch in host memory: {0}")]
    Memory(String),
}

/// What one replica's loader reads next.
pub enum Job {
    /// The training steps of an epoch: rows `(start, len)` of `order`, in the order the steps
    /// come.
    Train { epoch: usize, order: Arc<Vec<i64>>, steps: Vec<(usize, usize)> },
    /// Rows `start..start + len` of the validation split (`val`) or the test set, in batches
    /// of at most `batch`.
    Evaluate { val: bool, start: usize, len: usize, batch: usize },
}

/// A decoded batch: `images` `[n, C, H, W]` bytes on the host, the samples' labels and ids,
/// and the images that did not decode (left out, `path: why`).
pub struct Batch {
    generation: u64,
    /// The first row of the job's range this batch is (for the check against the step).
    pub start: usize,
    pub images: Tensor,
    pub labels: Tensor,
    pub ids: Vec<i64>,
    pub bad: Vec<String>,
    /// What taking it tells about the loader: the batches ready then (this one included), and
    /// the seconds decoding it took.
    pub tally: LoaderTally,
}

/// The streaming loader's settings (`--prefetch`, `--decode-threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Batches decoded ahead of each replica.
    pub prefetch: usize,
    /// Threads decoding images, shared by the process's replicas.
    pub decode_threads: usize,
    /// Samples per evaluation batch.
    pub eval_batch: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig { prefetch: 2, decode_threads: 1, eval_batch: 256 }
    }
}

/// Sums of what the replicas' streaming loaders reported with their steps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoaderTally {
    /// Batches taken, and the batches that were ready at each take, summed.
    pub taken: usize,
    pub ready: usize,
    /// Images decoded, and the seconds decoding them took.
    pub images: usize,
    pub seconds: f64,
}

impl LoaderTally {
    pub fn add(&mut self, t: LoaderTally) {
        self.taken += t.taken;
        self.ready += t.ready;
        self.images += t.images;
        self.seconds += t.seconds;
    }

    /// The window's figures, for a queue `depth` deep decoding on `threads` threads (none when
    /// nothing was taken).
    pub fn stats(&self, depth: usize, threads: usize) -> Option<crate::record::LoaderStats> {
        (self.taken > 0).then(|| crate::record::LoaderStats {
            ready: self.ready as f64 / self.taken as f64,
            depth,
            images_per_sec: self.images as f64 / self.seconds.max(1e-9),
            threads: Some(threads),
        })
    }
}

/// The streaming loader's decode threads are named `dpt-decode-<n>`.
pub const DECODE_THREAD_PREFIX: &str = "dpt-decode-";

/// What a run's streamed decoding is made from (the engine's configuration, said in the
/// loader's terms).
pub struct DecodingSpec<'a> {
    pub loader: &'a LoaderConfig,
    /// The training augmentation and the seed of its draws.
    pub augment: Augment,
    pub seed: u64,
    /// `data.max_bad`: the share of images that may fail to decode.
    pub max_bad: f64,
    /// CPU replicas run OpenMP teams of more than one thread beside the decode threads.
    pub cpu_teams: bool,
}

/// How a loader decodes: shared by the replicas' loaders of one process.
pub struct Decoding {
    pub data: Arc<Dataset>,
    pub pool: Arc<rayon::ThreadPool>,
    /// Batches ready ahead of the replica, at most.
    pub prefetch: usize,
    /// Samples per evaluation batch.
    pub eval_batch: usize,
    /// The training augmentation, all of it applied here: the random-resized crop (and the
    /// evaluation's resize + centre crop that goes with it), the padded crop and the flip.
    pub augment: Augment,
    pub seed: u64,
    pub bad: Arc<BadImages>,
    /// Where a CPU replica's team shares the cores with the decode threads.
    _short_spin: Option<ShortSpin>,
}

impl Decoding {
    /// The decoding of a run whose training data is streamed (`None`: resident data): the
    /// process's pool of `dpt-decode-N` threads, shared by its replicas' loaders.
    pub fn for_run(spec: DecodingSpec, data: &Arc<Dataset>) -> std::io::Result<Option<Arc<Decoding>>> {
        if !data.train.images.is_streamed() {
            return Ok(None);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(spec.loader.decode_threads.max(1))
            .thread_name(|i| format!("{DECODE_THREAD_PREFIX}{i}"))
            .start_handler(|_| crate::device::intra_op::keep_to_one_thread())
            .build()
            .map_err(std::io::Error::other)?;
        let total = data.train.len() + data.test.len() + data.val.as_ref().map_or(0, Split::len);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let short_spin = if spec.cpu_teams { Some(ShortSpin::start(cores)?) } else { None };
        Ok(Some(Arc::new(Decoding {
            data: Arc::clone(data),
            pool: Arc::new(pool),
            prefetch: spec.loader.prefetch,
            eval_batch: spec.loader.eval_batch,
            augment: spec.augment,
            seed: spec.seed,
            bad: Arc::new(BadImages::new(spec.max_bad, total)),
            _short_spin: short_spin,
        })))
    }
}

/// One replica's end of its loader.
pub struct Loader {
    jobs: Sender<(u64, Job)>,
    batches: Receiver<(u64, Result<Batch, LoadError>)>,
    generation: u64,
}

impl Loader {
    /// Starts replica `replica`'s loader thread; batches for a GPU replica are pinned.
    pub fn start(decoding: Arc<Decoding>, replica: usize, device: Device) -> std::io::Result<Loader> {
        let (jobs, job_rx) = unbounded();
        let (batch_tx, batches) = bounded(decoding.prefetch.max(1));
        std::thread::Builder::new()
            .name(format!("dpt-loader-{replica}"))
            .spawn(move || produce(&decoding, device, &job_rx, &batch_tx))?;
        Ok(Loader { jobs, batches, generation: 0 })
    }

    /// Reads `job` from now on; the batches of an earlier job not yet taken are dropped.
    pub fn submit(&mut self, job: Job) -> Result<(), LoadError> {
        self.generation += 1;
        self.jobs.send((self.generation, job)).map_err(|_| LoadError::Gone)
    }

    /// The next batch of the current job.
    pub fn next(&self) -> Result<Batch, LoadError> {
        loop {
            let ready = self.batches.len();
            let (generation, batch) = self.batches.recv().map_err(|_| LoadError::Gone)?;
            if generation == self.generation {
                return batch.map(|mut b| {
                    b.tally.ready = ready;
                    b
                });
            }
        }
    }

    /// The next batch, which must start at row `start` of the job's range.
    pub fn next_at(&self, start: usize) -> Result<Batch, LoadError> {
        let batch = self.next()?;
        if batch.start != start {
            return Err(LoadError::OutOfStep { got: batch.start, want: start });
        }
        Ok(batch)
    }
}

/// The loader thread: works through jobs until the replica's end is dropped, leaving a job as
/// soon as a newer one comes.
fn produce(
    decoding: &Decoding,
    device: Device,
    jobs: &Receiver<(u64, Job)>,
    out: &Sender<(u64, Result<Batch, LoadError>)>,
) {
    crate::device::intra_op::keep_to_one_thread();
    let mut next = jobs.recv().ok();
    while let Some((generation, job)) = next.take() {
        for (start, ids, epoch) in job_batches(&job) {
            match jobs.try_recv() {
                Ok(newer) => {
                    next = Some(newer);
                    break;
                }
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => {}
            }
            let split = match &job {
                Job::Train { .. } => Some(&decoding.data.train),
                Job::Evaluate { val: true, .. } => decoding.data.val.as_ref(),
                Job::Evaluate { val: false, .. } => Some(&decoding.data.test),
            };
            let batch = split
                .ok_or(LoadError::NotStreamed("validation"))
                .and_then(|s| decode_batch(decoding, s, &ids, epoch, device))
                .map(|mut b| {
                    b.generation = generation;
                    b.start = start;
                    b
                });
            let failed = batch.is_err();
            if out.send((generation, batch)).is_err() || failed {
                return;
            }
        }
        if next.is_none() {
            next = jobs.recv().ok();
        }
    }
}

/// A job's batches: (first row, sample ids, the epoch a training batch's draws belong to).
fn job_batches(job: &Job) -> Vec<(usize, Vec<i64>, Option<usize>)> {
    match job {
        Job::Train { epoch, order, steps } => steps
            .iter()
            .map(|&(start, len)| {
                let ids = order.get(start..start + len).unwrap_or_default().to_vec();
                (start, ids, Some(*epoch))
            })
            .collect(),
        Job::Evaluate { start, len, batch, .. } => (*start..start + len)
            .step_by((*batch).max(1))
            .map(|at| (at, (at as i64..(at + batch).min(start + len) as i64).collect(), None))
            .collect(),
    }
}

/// Decodes samples `ids` of `split` (training draws from `epoch`; evaluation: none).
fn decode_batch(
    decoding: &Decoding,
    split: &Split,
    ids: &[i64],
    epoch: Option<usize>,
    device: Device,
) -> Result<Batch, LoadError> {
    let Pixels::Streamed(stored) = &split.images else {
        return Err(LoadError::NotStreamed("training"));
    };
    let began = std::time::Instant::now();
    let per = split.sample_len();
    let shape = (split.channels, split.rows as u32, split.cols as u32);
    let (c, h, w) = (shape.0 as i64, shape.1 as i64, shape.2 as i64);
    // Decoded straight into the batch's tensor, page-locked for a GPU (so the replica's copy
    // runs without blocking, and nothing copies the batch on the host).
    let dims = [ids.len() as i64, c, h, w];
    let (images, (kept, failed)) = filled_bytes(&dims, device.is_cuda(), |buffer| {
        decode_into(decoding, stored, ids, (shape, per, epoch), buffer)
    })
    .map_err(|e| LoadError::Memory(e.0))?;
    decoding.bad.add(&failed)?;
    let bad = failed.iter().map(|(path, why)| format!("{}: {why}", path.display())).collect();
    let images = images.narrow(0, 0, kept.len() as i64);
    let labels = Tensor::from_slice(&kept.iter().map(|&i| split.labels[i as usize]).collect::<Vec<_>>());
    let labels = super::pinned(labels, device);
    let tally = LoaderTally { taken: 1, ready: 0, images: ids.len(), seconds: began.elapsed().as_secs_f64() };
    Ok(Batch { generation: 0, start: 0, images, labels, ids: kept, bad, tally })
}

/// Decodes samples `ids` into `buffer` (`per` bytes each, `shape` as the job fits them), on the
/// decoding pool; the ones that decoded are moved to the front, in order. Returns their ids and
/// the others' names with why they failed.
#[allow(clippy::type_complexity)]
fn decode_into(
    decoding: &Decoding,
    stored: &Streamed,
    ids: &[i64],
    (shape, per, epoch): ((usize, u32, u32), usize, Option<usize>),
    buffer: &mut [u8],
) -> (Vec<i64>, Vec<(std::path::PathBuf, String)>) {
    let results: Vec<Result<(), SampleError>> = decoding.pool.install(|| {
        buffer
            .par_chunks_mut(per.max(1))
            .zip(ids.par_iter())
            .map(|(slot, &id)| {
                // A decoder that panics on a malformed file fails that image, not the run.
                let decode = || decode_one(decoding, stored, id as usize, shape, epoch, slot);
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
                    Err(SampleError::DecoderPanicked(dpt_sys::panic_message(panic.as_ref())))
                })
            })
            .collect()
    });
    let mut failed = Vec::new();
    let mut kept = Vec::with_capacity(ids.len());
    for (k, (result, &id)) in results.into_iter().zip(ids).enumerate() {
        match result {
            Ok(()) => {
                if kept.len() != k {
                    buffer.copy_within(k * per..(k + 1) * per, kept.len() * per);
                }
                kept.push(id);
            }
            Err(why) => failed.push((stored.name(id as usize), why.to_string())),
        }
    }
    (kept, failed)
}

/// Decodes sample `id` into `slot`, fitted as the job says.
fn decode_one(
    decoding: &Decoding,
    stored: &Streamed,
    id: usize,
    shape: (usize, u32, u32),
    epoch: Option<usize>,
    slot: &mut [u8],
) -> Result<(), SampleError> {
    let fit = |size: (u32, u32)| match (&decoding.augment.resized_crop, epoch) {
        (Some(crop), Some(epoch)) => resized_crop::region(crop, decoding.seed, epoch, id as i64, size),
        (Some(_), None) => resized_crop::evaluation(shape.1),
        (None, _) => Fit::Whole { resize: stored.resize },
    };
    let Some(epoch) = epoch.filter(|_| decoding.augment.on_device()) else {
        return stored.sample_into(id, shape, fit, slot);
    };
    // The crop and flip the device applies to resident data, here on the host (a gather on a
    // CPU replica's compute thread costs more than decoding the image).
    let mut fitted = vec![0u8; slot.len()];
    stored.sample_into(id, shape, fit, &mut fitted)?;
    let draw = augment::draw(&decoding.augment, decoding.seed, epoch, id as i64);
    augment::apply_one(&decoding.augment, draw, &fitted, slot, (shape.1 as usize, shape.2 as usize));
    Ok(())
}
