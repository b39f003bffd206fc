//! What the model is fed: the inputs' normalization (`--normalize`, the built-in model's, or
//! the training set's own), whether a built-in model takes the data, and the two samples a
//! TorchScript model is checked against before the run starts.

use anyhow::anyhow;

use super::input;
use crate::Failure;
use dpt_tui::data::{DataError, Dataset, Pixels};
use dpt_tui::engine::TrainConfig;
use dpt_tui::input::resident::{Normalizer, Resident};
use dpt_tui::model::script::SampleInputs;
use dpt_tui::model::{ModelKind, Normalization};
use tch::Tensor;

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
        // Token ids are not normalized; the value is recorded, never applied.
        (None, None) if matches!(data.train.images, Pixels::Tokens(_)) => Normalization::uniform(0.0, 1.0),
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
    if let Some(t) = data.train.targets.as_ref().filter(|_| model != ModelKind::Script) {
        return Err(input(anyhow!(
            "{} holds targets of shape {:?} per sample, not class ids, and {} is a classifier: train a model of your own that computes its loss with --model FILE.pt (forward(inputs, targets))",
            data.source,
            t.shape,
            model.name()
        )));
    }
    if model == ModelKind::Script || (shape == [1, 28, 28] && data.classes <= 10) {
        return Ok(());
    }
    if matches!(data.train.images, Pixels::Tokens(_)) {
        return Err(input(anyhow!(
            "{} is token data and {} an image classifier: train a language model of your own on it with --model FILE.pt (a TorchScript or traced module; docs/guides/language-models.md)",
            data.source,
            model.name()
        )));
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

/// Two samples of the training set, as the model gets them, and their targets: normalized
/// images `[2, C, H, W]` with their labels, or token windows `[2, T]` with the next tokens (one
/// of each if there is only one); and the largest target (the largest training label, or the
/// largest token of the two windows). What a TorchScript model is checked against before the
/// run starts.
pub fn sample_inputs(data: &Dataset, norm: &Normalization) -> Result<SampleInputs, DataError> {
    let first = data.train.head(2);
    if let Pixels::Tokens(w) = &first.images {
        let n = w.count.min(2);
        let (x, y) = w.read(0..n as u64)?;
        let max_target = x.iter().chain(&y).copied().max().unwrap_or(0);
        let shape = [n as i64, w.block as i64];
        return Ok(SampleInputs {
            x: Tensor::from_slice(&x).view(shape),
            y: Tensor::from_slice(&y).view(shape),
            max_target,
        });
    }
    let raw = Resident::upload(&first, tch::Device::Cpu).images;
    let normalizer = Normalizer::new(norm, first.images.unit(), first.channels, tch::Device::Cpu);
    let max_target = data.train.labels.iter().copied().max().unwrap_or(0);
    let y = first.targets.as_ref().map_or_else(|| Tensor::from_slice(&first.labels), |t| t.tensor());
    Ok(SampleInputs { x: normalizer.apply(&raw), y, max_target })
}
