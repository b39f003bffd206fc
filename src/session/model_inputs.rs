//! What the model is fed: the inputs' normalization (`--normalize`, the built-in model's, or
//! the training set's own), whether a built-in model takes the data, and the two samples a
//! TorchScript model is checked against before the run starts.

use anyhow::anyhow;

use super::input;
use crate::Failure;
use dpt_tui::data::Dataset;
use dpt_tui::engine::TrainConfig;
use dpt_tui::input::resident::{Normalizer, Resident};
use dpt_tui::model::{ModelKind, Normalization};

/// The normalization of a run: `--normalize`, else the resumed run's own (a value of the run,
/// measured once: a continued run never measures it again), else the built-in model's (its
/// reference program's), else (a TorchScript model) the training set's own per-channel mean
/// and std.
pub fn normalization(cfg: &TrainConfig, data: &Dataset) -> Result<Normalization, Failure> {
    let channels = data.train.channels;
    let recorded = cfg.kit.resume.as_ref().and_then(|r| r.state.normalize.clone());
    let norm = match (&cfg.settings.model.normalize, recorded) {
        (Some(n), _) => n.clone(),
        (None, Some(n)) => n,
        (None, None) if cfg.model() != ModelKind::Script => cfg.model().normalization(),
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
