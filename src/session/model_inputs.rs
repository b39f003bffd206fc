//! What the model is fed: the inputs' normalization (`--normalize`, the built-in model's, or
//! the training set's own), whether a built-in model takes the data, and the two samples a
//! TorchScript model is checked against before the run starts.

use anyhow::anyhow;

use super::input;
use crate::cli::Args;
use crate::Failure;
use dpt_tui::data::Dataset;
use dpt_tui::engine::resident::{Normalizer, Resident};
use dpt_tui::engine::TrainConfig;
use dpt_tui::model::{ModelKind, Normalization};

/// `--normalize MEAN,STD` (every channel) or `M1,…,MC,S1,…,SC` (C means, then C stds).
pub fn parse_normalize(text: &str) -> Result<Normalization, anyhow::Error> {
    let bad = || {
        anyhow!("--normalize takes MEAN,STD or one mean per channel then one std per channel (such as 0.49,0.48,0.45,0.25,0.24,0.26), got '{text}'")
    };
    let values: Vec<f64> =
        text.split(',').map(|v| v.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if values.len() < 2 || values.len() % 2 != 0 {
        return Err(bad());
    }
    let (mean, std) = values.split_at(values.len() / 2);
    if !(mean.iter().all(|m| m.is_finite()) && std.iter().all(|s| s.is_finite() && *s > 0.0)) {
        return Err(anyhow!("--normalize needs finite means and positive stds, got '{text}'"));
    }
    Ok(Normalization { mean: mean.to_vec(), std: std.to_vec() })
}

/// The normalization of a run: `--normalize`, else the built-in model's (its reference program's), else
/// (a TorchScript model) the training set's own per-channel mean and std.
pub fn normalization(args: &Args, cfg: &TrainConfig, data: &Dataset) -> Result<Normalization, Failure> {
    let channels = data.train.channels;
    let recorded = cfg.resume.as_ref().and_then(|r| r.state.normalize.clone());
    let norm = match (&args.normalize, recorded) {
        (Some(text), _) => parse_normalize(text).map_err(input)?,
        // A resumed run goes on with the inputs it trained on.
        (None, Some(n)) => Normalization { mean: n.mean, std: n.std },
        (None, None) if cfg.model != ModelKind::Script => cfg.model.normalization(),
        (None, None) => {
            let (mean, std) = data.channel_stats();
            Normalization { mean, std }
        }
    };
    if norm.mean.len() != 1 && norm.mean.len() != channels {
        return Err(input(anyhow!(
            "--normalize gives {} channels' values but the images have {channels}; give one mean and std, or one per channel",
            norm.mean.len()
        )));
    }
    Ok(norm)
}

/// The built-in models take (Fashion-)MNIST: 1×28×28 images, 10 classes.
pub fn builtin_fits(model: ModelKind, data: &Dataset) -> Result<(), Failure> {
    let shape = data.train.sample_shape();
    if model == ModelKind::Script || (shape == [1, 28, 28] && data.classes <= 10) {
        return Ok(());
    }
    Err(input(anyhow!(
        "{} takes 1x28x28 images in 10 classes; {} holds {}x{}x{} images in {} classes: train your own model on it with --model FILE.pt",
        model.name(),
        data.source,
        shape[0],
        shape[1],
        shape[2],
        data.classes
    )))
}

/// Two normalized training images `[2, C, H, W]` (one if there is only one) and the largest
/// training label: what a TorchScript model is checked against before the run starts.
pub fn sample_inputs(data: &Dataset, norm: &Normalization) -> (tch::Tensor, i64) {
    let first = data.train.head(2);
    let raw = Resident::upload(&first, tch::Device::Cpu).images;
    let normalizer = Normalizer::new(norm, first.images.unit(), first.channels, tch::Device::Cpu);
    let max_label = data.train.labels.iter().copied().max().unwrap_or(0);
    (normalizer.apply(&raw), max_label)
}
