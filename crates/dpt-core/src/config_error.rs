//! Why the engine refuses a run before it starts: one line each, naming the setting and the way
//! out.

use thiserror::Error;

use crate::optim::schedule::ScheduleError;

/// A request the engine refuses before starting.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("--batch-size must be at least 1")]
    ZeroBatch,
    /// `--cuda-graphs on` for a run that cannot graph, with the reason.
    #[error("{0}")]
    CudaGraphs(String),
    #[error("{0}")]
    Zero(String),
    #[error("--snapshots {snapshots}: the rewind points need {needed} of host memory ({each} each{per_host}) and {available} is available; keep fewer with --snapshots K, or none with --snapshots 0")]
    SnapshotMemory { snapshots: usize, each: String, per_host: String, needed: String, available: String },
    #[error("--batch-size {batch} is smaller than the {replicas} replicas; use a batch of at least {replicas} or fewer devices")]
    BatchSmallerThanReplicas { batch: usize, replicas: usize },
    #[error("--lr must be a positive finite number, got {0}")]
    BadLr(f64),
    #[error("--momentum must be a finite number in [0, 1), got {0}")]
    BadMomentum(f64),
    #[error("--weight-decay must be a finite number ≥ 0, got {0}")]
    BadWeightDecay(f64),
    #[error("--nesterov needs --optimizer sgd with a --momentum above 0")]
    NesterovWithoutMomentum,
    #[error("--betas must be two numbers in [0, 1), got {0},{1}")]
    BadBetas(f64, f64),
    #[error("--eps must be a positive finite number, got {0}")]
    BadEps(f64),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("--label-smoothing must be a number in [0, 1), got {0}")]
    BadLabelSmoothing(f64),
    #[error("--clip-grad-norm must be a positive finite number, got {0}")]
    BadClip(f64),
    #[error("--ema must be a decay in (0, 1) such as 0.999, got {0}")]
    BadEma(f64),
    #[error("--early-stop must be at least 1 (evaluations without improvement)")]
    ZeroPatience,
    #[error("--accumulate must be at least 1")]
    ZeroAccumulate,
    #[error("--accumulate {accumulate} splits each replica's {per_replica} samples per step finer than one sample; use at most {per_replica}, or a larger --batch-size")]
    AccumulateTooFine { accumulate: usize, per_replica: usize },
    #[error("--epochs must be at least 1")]
    ZeroEpochs,
    #[error("--log-every must be at least 1")]
    ZeroLogEvery,
    #[error("the training set is empty; check --train-limit and the data directory")]
    EmptyTrainSet,
    #[error("the test set is empty; check --test-limit and the data directory")]
    EmptyTestSet,
    #[error("--step-timeout must be more than 0 seconds")]
    ZeroTimeout,
    #[error("--precision bf16 needs bfloat16 tensor cores (compute capability 8.0, Ampere, or newer); {device} is sm{major}{minor}: use --precision f32 there")]
    Bf16Unsupported { device: String, major: i32, minor: i32 },
    #[error(
        "the checkpoint was trained with batch {checkpoint}, not {asked}; drop --batch-size to continue it"
    )]
    ResumeBatch { checkpoint: usize, asked: usize },
    #[error("the checkpoint was trained on {checkpoint} samples, this data set has {found}; use the same data and --train-limit")]
    ResumeSamples { checkpoint: usize, found: usize },
    #[error("the checkpoint has already finished {done} of {epochs} epochs; pass --epochs N with N > {done} to train further")]
    ResumeDone { done: usize, epochs: usize },
    #[error("this run trains a TorchScript model but none was given; pass --model FILE.pt")]
    ScriptMissing,
    #[error("--loss-scale-init must be a finite number above 0 and --loss-scale-interval at least 1; got {init} and {interval}")]
    BadLossScale { init: f32, interval: u32 },
    #[error("--normalize needs finite means and positive stds, one pair or one per channel; got {0}")]
    BadNormalization(String),
}

/// Checks a learning rate given on the command line or at run time.
pub fn check_lr(lr: f64) -> Result<f64, ConfigError> {
    if lr.is_finite() && lr > 0.0 {
        Ok(lr)
    } else {
        Err(ConfigError::BadLr(lr))
    }
}
