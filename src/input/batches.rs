//! Where a worker's batches come from: its splits resident on the device (gathered by index
//! from the epoch's order, augmented on the device), or its streaming loader (decoded and
//! augmented by the loader's threads, copied to the device without blocking). Either way a
//! batch leaves here normalized, as the network's input.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::augment::{self, Augment};
use super::loader::{Decoding, LoadError, LoaderTally};
use super::loader::{Job, Loader};
use super::resident::{Normalizer, Resident};
use crate::data::tokens::TokenWindows;
use crate::data::{Dataset, Pixels};
use dpt_core::model::Normalization;

/// Why a worker's batch could not be had.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("a step before the first epoch")]
    NoEpoch,
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A token window could not be read.
    #[error(transparent)]
    Data(#[from] Box<crate::data::DataError>),
    #[error("cannot start the loader thread: {0}")]
    LoaderThread(String),
}

/// What one replica's batches come from and how they are made.
pub struct BatchSpec {
    pub replica: usize,
    pub device: Device,
    pub data: Arc<Dataset>,
    /// The streaming loader's decoding, when the data is streamed (else it is resident).
    pub loader: Option<Arc<Decoding>>,
    /// Samples per evaluation batch of resident data and token windows (streamed data: the
    /// loader's).
    pub eval_batch: usize,
    /// The training augmentation, and the seed of its draws.
    pub augment: Augment,
    pub seed: u64,
    pub normalization: Normalization,
}

/// A batch on the device: the network's inputs and labels, the images left out because they
/// did not decode, what taking it from the streaming loader told.
pub(crate) struct Batch {
    pub x: Tensor,
    pub y: Tensor,
    pub bad: Vec<String>,
    pub loader: Option<LoaderTally>,
}

enum Source {
    /// The splits on the device, and the epoch's order there.
    Resident { train: Resident, test: Resident, val: Option<Resident>, order: Option<Tensor> },
    /// Decoded batch by batch by the replica's loader thread.
    Streamed(Loader),
    /// Windows of token files, read as the steps reach them.
    Tokens { train: TokenWindows, test: TokenWindows },
}

/// One worker's batches.
pub(crate) struct Batches {
    device: Device,
    source: Source,
    /// The epoch in progress and its order on the host (the augmentation's draws).
    epoch: (usize, Arc<Vec<i64>>),
    augment: Augment,
    seed: u64,
    normalizer: Normalizer,
    /// Samples per evaluation batch.
    eval_batch: usize,
}

impl Batches {
    /// The splits uploaded to the replica's device, or its loader thread started.
    pub fn new(setup: &BatchSpec) -> Result<Batches, BatchError> {
        let (source, eval_batch) = match (&setup.loader, &setup.data.train.images, &setup.data.test.images) {
            (_, Pixels::Tokens(train), Pixels::Tokens(test)) => {
                (Source::Tokens { train: train.clone(), test: test.clone() }, setup.eval_batch)
            }
            (Some(decoding), ..) => {
                let loader = Loader::start(Arc::clone(decoding), setup.replica, setup.device)
                    .map_err(|e| BatchError::LoaderThread(e.to_string()))?;
                (Source::Streamed(loader), decoding.eval_batch)
            }
            (None, ..) => (
                Source::Resident {
                    train: Resident::upload(&setup.data.train, setup.device),
                    test: Resident::upload(&setup.data.test, setup.device),
                    val: setup.data.val.as_ref().map(|v| Resident::upload(v, setup.device)),
                    order: None,
                },
                setup.eval_batch,
            ),
        };
        let train = &setup.data.train;
        Ok(Batches {
            device: setup.device,
            source,
            epoch: (0, Arc::default()),
            augment: setup.augment,
            seed: setup.seed,
            normalizer: Normalizer::new(
                &setup.normalization,
                train.images.unit(),
                train.channels,
                setup.device,
            ),
            eval_batch,
        })
    }

    /// A new epoch: its order, and the rows this replica trains on at each of its steps.
    pub fn start_epoch(
        &mut self,
        epoch: usize,
        order: Arc<Vec<i64>>,
        steps: Vec<(usize, usize)>,
    ) -> Result<(), BatchError> {
        match &mut self.source {
            Source::Streamed(loader) => {
                loader.submit(Job::Train { epoch, order: Arc::clone(&order), steps })?
            }
            Source::Resident { order: on_device, .. } => {
                // Page-locked and not blocking the replica: no drain at an epoch's start.
                let host = super::pinned(Tensor::from_slice(order.as_slice()), self.device);
                *on_device = Some(host.to_device_(self.device, Kind::Int64, true, false));
            }
            // A window's offset is drawn from its place in the run, not from the order.
            Source::Tokens { .. } => {}
        }
        self.epoch = (epoch, order);
        Ok(())
    }

    /// The step's training rows `start..start + len` of the epoch order.
    pub fn train(&self, start: usize, len: usize) -> Result<Batch, BatchError> {
        let (epoch, order) = &self.epoch;
        match &self.source {
            Source::Resident { train, order: on_device, .. } => {
                let index =
                    on_device.as_ref().ok_or(BatchError::NoEpoch)?.narrow(0, start as i64, len as i64);
                // The host's copy of the order the device's came with; a step outside it is a bug.
                let ids = order.get(start..start + len).ok_or(BatchError::NoEpoch)?;
                let x = self.augmented(train.images.index_select(0, &index), *epoch, ids);
                Ok(Batch { x, y: train.labels.index_select(0, &index), bad: Vec::new(), loader: None })
            }
            // Augmented by the loader's threads already.
            Source::Streamed(loader) => self.upload(loader.next_at(start)?),
            // Row r of period e is window e·count + r of the run: global step s's k-th window
            // is window s·batch + k, whichever replica reads it.
            Source::Tokens { train, .. } => {
                let first = (*epoch * train.count + start) as u64;
                self.tokens(train, first..first + len as u64)
            }
        }
    }

    /// Token windows `indices` of `windows` on the device: inputs and targets, `[n, T]` int64,
    /// in one copy from page-locked memory that does not block the replica (nanoGPT's
    /// `get_batch`: `pin_memory()`, then `to(device, non_blocking=True)`).
    fn tokens(&self, windows: &TokenWindows, indices: std::ops::Range<u64>) -> Result<Batch, BatchError> {
        let n = indices.end.saturating_sub(indices.start) as i64;
        let (mut both, y) = windows.read(indices).map_err(Box::new)?;
        both.extend(y);
        let host = super::pinned(Tensor::from_slice(&both).view([2, n, windows.block as i64]), self.device);
        let both = host.to_device_(self.device, Kind::Int64, true, false);
        Ok(Batch { x: both.get(0), y: both.get(1), bad: Vec::new(), loader: None })
    }

    /// Starts an evaluation of rows `start..start + len` of the validation split (`val`) or the
    /// test set; returns the batch size it goes in.
    pub fn start_evaluation(&mut self, val: bool, start: usize, len: usize) -> Result<usize, BatchError> {
        let batch = self.eval_batch;
        if let Source::Streamed(loader) = &mut self.source {
            loader.submit(Job::Evaluate { val, start, len, batch })?;
        }
        Ok(batch)
    }

    /// The evaluation's rows `offset..offset + n` of the validation split (`val`) or the test set.
    pub fn evaluation(&self, offset: usize, n: usize, val: bool) -> Result<Batch, BatchError> {
        match &self.source {
            Source::Resident { test, val: v, .. } => {
                let set = if val { v.as_ref().unwrap_or(test) } else { test };
                let (at, n) = (offset as i64, n as i64);
                let x = self.normalizer.apply(&set.images.narrow(0, at, n));
                Ok(Batch { x, y: set.labels.narrow(0, at, n), bad: Vec::new(), loader: None })
            }
            Source::Streamed(loader) => self.upload(loader.next_at(offset)?),
            // The evaluated windows are the same every evaluation: window r is row r.
            Source::Tokens { test, .. } => self.tokens(test, offset as u64..(offset + n) as u64),
        }
    }

    /// A streamed batch on the device (pinned host memory: the copy does not block), normalized.
    fn upload(&self, b: super::loader::Batch) -> Result<Batch, BatchError> {
        let x = b.images.to_device_(self.device, Kind::Uint8, true, false);
        let y = b.labels.to_device_(self.device, Kind::Int64, true, false);
        Ok(Batch { x: self.normalizer.apply(&x), y, bad: b.bad, loader: Some(b.tally) })
    }

    /// `raw` training samples `ids` augmented on the device (crop, flip) and normalized.
    fn augmented(&self, raw: Tensor, epoch: usize, ids: &[i64]) -> Tensor {
        if !self.augment.on_device() || ids.is_empty() {
            return self.normalizer.apply(&raw);
        }
        let draws = super::augment::draws(&self.augment, self.seed, epoch, ids);
        self.normalizer.apply(&augment::apply(&self.augment, &raw, &draws))
    }
}
