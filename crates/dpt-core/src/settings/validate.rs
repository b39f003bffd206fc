//! Why a run's settings cannot train: one typed refusal each, naming the setting by its flag
//! and the way out, checked once, before any data is loaded.

use std::path::PathBuf;

use thiserror::Error;

use super::Settings;
use crate::config_error::check_lr;
use crate::config_error::ConfigError;
use crate::model::ModelKind;
use crate::optim::OptimizerKind;

/// Settings that cannot train, or a configuration file that cannot be read.
#[derive(Debug, Error, PartialEq)]
pub enum SettingsError {
    #[error("--config {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Value(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "the checkpoint was trained with --optimizer {was}, not {asked}; drop --optimizer to continue it"
    )]
    OtherOptimizer { was: OptimizerKind, asked: OptimizerKind },
    #[error("--loss is for TorchScript models; {0} trains with its reference program's loss")]
    LossOfBuiltin(&'static str),
    #[error("--momentum is for --optimizer sgd; {0} uses --betas")]
    MomentumWithAdam(OptimizerKind),
    #[error("--betas, --eps and --decay-all are for --optimizer adam or adamw")]
    AdamSettingsWithSgd,
    #[error("--lr-batch-ref must be at least 1 (the batch --lr was tuned for)")]
    ZeroLrBatchRef,
    #[error("--keep-checkpoints must be at least 1 (the newest checkpoint)")]
    ZeroKeepCheckpoints,
    #[error("--bucket-cap-mb must be a number of MiB ≥ 0 (0: reduce after the backward pass)")]
    BadBucketCap,
    #[error("--save-retry-secs must be a number of seconds ≥ 0")]
    BadSaveRetrySecs,
    #[error("--step-timeout must be a positive number of seconds")]
    BadStepTimeout,
    #[error("--dist-timeout must be a positive number of seconds")]
    BadDistTimeout,
    #[error("--cpu-threads must be at least 1")]
    ZeroCpuThreads,
    #[error("--prefetch must be at least 1")]
    ZeroPrefetch,
    #[error("--decode-threads must be at least 1")]
    ZeroDecodeThreads,
    #[error("--max-bad-images takes a share between 0 and 1 such as 0.001, got {0}")]
    BadMaxBad(f64),
    #[error("--val-fraction must be a fraction between 0 and 1 such as 0.1, got {0}")]
    BadValFraction(f64),
    #[error("--{0} must be at least 1")]
    ZeroCount(&'static str),
    #[error("--steps is the length of a token-data run, which has no epochs: drop --epochs")]
    StepsAndEpochs,
    #[error(
        "--loss-scale-init and --loss-scale-interval set up loss scaling, which is off: add --loss-scale on"
    )]
    LossScaleOff,
    #[error("--augment imagenet crops every image at its own size while training, which the streaming loader does; drop --loader resident")]
    ResizedCropResident,
}

impl super::Placement {
    /// Refuses a placement that cannot run (checked before the ranks meet: the backend and the
    /// deadline decide how they do).
    pub fn validate(&self) -> Result<(), SettingsError> {
        use SettingsError as E;
        if !(self.bucket_cap_mb.is_finite() && self.bucket_cap_mb >= 0.0) {
            return Err(E::BadBucketCap);
        }
        if !(self.step_timeout.is_finite() && self.step_timeout > 0.0) {
            return Err(E::BadStepTimeout);
        }
        if !(self.dist_timeout.is_finite() && self.dist_timeout > 0.0) {
            return Err(E::BadDistTimeout);
        }
        if self.cpu_threads == Some(0) {
            return Err(E::ZeroCpuThreads);
        }
        if self.prefetch == 0 {
            return Err(E::ZeroPrefetch);
        }
        if self.decode_threads == Some(0) {
            return Err(E::ZeroDecodeThreads);
        }
        if self.log_every == 0 {
            return Err(E::Config(ConfigError::ZeroLogEvery));
        }
        Ok(())
    }
}

impl Settings {
    /// Refuses settings that cannot train, whatever the data and the devices.
    pub fn validate(&self) -> Result<(), SettingsError> {
        use SettingsError as E;
        let model = self.model_kind();
        if self.model.loss.is_some() && model != ModelKind::Script {
            return Err(E::LossOfBuiltin(model.name()));
        }
        let o = &self.optimizer;
        let sgd = crate::optim::OptimConfig::sgd(o.lr, 0.0, 0.0);
        if o.kind != OptimizerKind::Sgd && o.momentum != 0.0 {
            return Err(E::MomentumWithAdam(o.kind));
        }
        if o.kind == OptimizerKind::Sgd && (o.betas != sgd.betas || o.eps != sgd.eps || o.decay_all) {
            return Err(E::AdamSettingsWithSgd);
        }
        let r = &self.recipe;
        if r.lr_batch_ref == Some(0) {
            return Err(E::ZeroLrBatchRef);
        }
        if self.checkpoints.keep == 0 {
            return Err(E::ZeroKeepCheckpoints);
        }
        let counts = [
            ("steps", r.steps),
            ("eval-every", r.eval_every),
            ("eval-batches", Some(r.eval_batches)),
            ("block-size", self.data.block_size),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, n)| *n == Some(0)) {
            return Err(E::ZeroCount(flag));
        }
        self.placement.validate()?;
        let secs = self.checkpoints.save_retry_secs;
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(E::BadSaveRetrySecs);
        }
        let d = &self.data;
        if !(d.max_bad.is_finite() && (0.0..=1.0).contains(&d.max_bad)) {
            return Err(E::BadMaxBad(d.max_bad));
        }
        if let Some(f) = d.val_fraction.filter(|f| !(f.is_finite() && *f > 0.0 && *f < 1.0)) {
            return Err(E::BadValFraction(f));
        }
        self.validate_numbers().map_err(E::Config)
    }

    /// The numeric checks the engine states its refusals in.
    pub fn validate_numbers(&self) -> Result<(), ConfigError> {
        let r = &self.recipe;
        if r.batch_size == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        let o = &self.optimizer;
        check_lr(o.lr)?;
        if !(o.momentum.is_finite() && (0.0..1.0).contains(&o.momentum)) {
            return Err(ConfigError::BadMomentum(o.momentum));
        }
        if o.nesterov && (o.kind != OptimizerKind::Sgd || o.momentum == 0.0) {
            return Err(ConfigError::NesterovWithoutMomentum);
        }
        if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
            return Err(ConfigError::BadWeightDecay(o.weight_decay));
        }
        let (b1, b2) = o.betas;
        if ![b1, b2].iter().all(|b| b.is_finite() && (0.0..1.0).contains(b)) {
            return Err(ConfigError::BadBetas(b1, b2));
        }
        if !(o.eps.is_finite() && o.eps > 0.0) {
            return Err(ConfigError::BadEps(o.eps));
        }
        if !(r.label_smoothing.is_finite() && (0.0..1.0).contains(&r.label_smoothing)) {
            return Err(ConfigError::BadLabelSmoothing(r.label_smoothing));
        }
        if let Some(d) = r.ema.filter(|d| !(d.is_finite() && *d > 0.0 && *d < 1.0)) {
            return Err(ConfigError::BadEma(d));
        }
        if self.best.early_stop == Some(0) {
            return Err(ConfigError::ZeroPatience);
        }
        if r.accumulate == 0 {
            return Err(ConfigError::ZeroAccumulate);
        }
        if let Some(c) = r.clip_grad_norm.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(ConfigError::BadClip(c));
        }
        if r.epochs == 0 {
            return Err(ConfigError::ZeroEpochs);
        }
        if self.placement.log_every == 0 {
            return Err(ConfigError::ZeroLogEvery);
        }
        if let Some(l) = self.precision.loss_scaling().filter(|l| !l.valid()) {
            return Err(ConfigError::BadLossScale { init: l.init, interval: l.growth_interval });
        }
        if let Some(n) = &self.model.normalize {
            let good = !n.mean.is_empty()
                && n.std.len() == n.mean.len()
                && n.mean.iter().all(|m| m.is_finite())
                && n.std.iter().all(|s| s.is_finite() && *s > 0.0);
            if !good {
                return Err(ConfigError::BadNormalization(format!("{:?} / {:?}", n.mean, n.std)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_setting() {
        let ok = Settings::default();
        assert_eq!(ok.validate(), Ok(()));
        let mut s = ok.clone();
        s.recipe.label_smoothing = 1.0;
        assert_eq!(s.validate(), Err(SettingsError::Config(ConfigError::BadLabelSmoothing(1.0))));
        let mut s = ok.clone();
        s.placement.bucket_cap_mb = -1.0;
        assert!(s.validate().expect_err("refused").to_string().contains("--bucket-cap-mb"));
        let mut s = ok;
        s.optimizer.kind = OptimizerKind::Adam;
        s.optimizer.momentum = 0.9;
        assert_eq!(s.validate(), Err(SettingsError::MomentumWithAdam(OptimizerKind::Adam)));
    }
}
