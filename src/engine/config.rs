//! What one training run is asked to do, and the checks that reject a bad request up front.

use std::path::PathBuf;

use thiserror::Error;

use super::device::DeviceId;
use super::sgd::Sgd;
use crate::model::ModelKind;

/// A request the engine refuses before starting.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("--batch-size must be at least 1")]
    ZeroBatch,
    #[error("--batch-size {batch} is smaller than the {replicas} replicas; use a batch of at least {replicas} or fewer devices")]
    BatchSmallerThanReplicas { batch: usize, replicas: usize },
    #[error("--lr must be a positive finite number, got {0}")]
    BadLr(f64),
    #[error("--momentum must be a finite number in [0, 1), got {0}")]
    BadMomentum(f64),
    #[error("--weight-decay must be a finite number ≥ 0, got {0}")]
    BadWeightDecay(f64),
    #[error("--epochs must be at least 1")]
    ZeroEpochs,
    #[error("--log-every must be at least 1")]
    ZeroLogEvery,
    #[error("the training set is empty; check --train-limit and the data directory")]
    EmptyTrainSet,
    #[error("the test set is empty; check --test-limit and the data directory")]
    EmptyTestSet,
}

/// Checks a learning rate given on the command line or at run time.
pub fn check_lr(lr: f64) -> Result<f64, ConfigError> {
    if lr.is_finite() && lr > 0.0 {
        Ok(lr)
    } else {
        Err(ConfigError::BadLr(lr))
    }
}

/// Everything a run needs besides the data.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub model: ModelKind,
    pub devices: Vec<DeviceId>,
    pub epochs: usize,
    /// Global batch, split over the replicas.
    pub batch_size: usize,
    pub sgd: Sgd,
    pub seed: u64,
    /// Report training statistics (a device sync) every this many steps, and at epoch ends.
    pub log_every: usize,
    /// Where weights are saved; `None` saves nothing.
    pub run_dir: Option<PathBuf>,
    /// End the run after this many steps in all.
    pub max_steps: Option<usize>,
    /// Compare every replica's parameters with replica 0's after each step (slow; for tests).
    pub check_replicas: bool,
    /// Intra-op threads of each CPU replica.
    pub cpu_threads: usize,
}

impl TrainConfig {
    /// The seed's settings for `model` on `devices`.
    pub fn new(model: ModelKind, devices: Vec<DeviceId>) -> Self {
        let d = model.defaults();
        TrainConfig {
            model,
            devices,
            epochs: d.epochs,
            batch_size: d.batch_size,
            sgd: Sgd { lr: d.lr, momentum: d.momentum, weight_decay: 0.0 },
            seed: 0,
            log_every: 50,
            run_dir: None,
            max_steps: None,
            check_replicas: false,
            cpu_threads: 1,
        }
    }

    /// Rejects settings that cannot train.
    pub fn validate(&self, train_len: usize, test_len: usize) -> Result<(), ConfigError> {
        if self.batch_size == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if self.batch_size < self.devices.len() {
            return Err(ConfigError::BatchSmallerThanReplicas {
                batch: self.batch_size,
                replicas: self.devices.len(),
            });
        }
        check_lr(self.sgd.lr)?;
        if !(self.sgd.momentum.is_finite() && (0.0..1.0).contains(&self.sgd.momentum)) {
            return Err(ConfigError::BadMomentum(self.sgd.momentum));
        }
        if !(self.sgd.weight_decay.is_finite() && self.sgd.weight_decay >= 0.0) {
            return Err(ConfigError::BadWeightDecay(self.sgd.weight_decay));
        }
        if self.epochs == 0 {
            return Err(ConfigError::ZeroEpochs);
        }
        if self.log_every == 0 {
            return Err(ConfigError::ZeroLogEvery);
        }
        if train_len == 0 {
            return Err(ConfigError::EmptyTrainSet);
        }
        if test_len == 0 {
            return Err(ConfigError::EmptyTestSet);
        }
        Ok(())
    }

    /// Steps in one epoch (the last partial batch is kept).
    pub fn steps_per_epoch(&self, train_len: usize) -> usize {
        train_len.div_ceil(self.batch_size)
    }
}
