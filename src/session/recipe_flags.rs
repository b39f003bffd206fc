//! The flags of the recipe beyond the optimizer's: dynamic loss scaling and augmentation, each
//! from the command line over a resumed run's own.

use anyhow::anyhow;

use crate::cli::{Args, OnOff};

/// `--loss-scale` and its settings: on by default with `--precision f16` or when the resumed run
/// scaled its loss (its settings then stay, and its scale continues).
pub fn loss_scaling(
    args: &Args,
    saved: Option<dpt_tui::engine::optim::loss_scale::LossScaler>,
) -> anyhow::Result<Option<dpt_tui::engine::optim::loss_scale::LossScaling>> {
    use dpt_tui::engine::optim::loss_scale::LossScaling;
    let default_on = args.precision == dpt_tui::model::Precision::F16 || saved.is_some();
    let on = args.scaling.loss_scale.map_or(default_on, |v| v == OnOff::On);
    if !on {
        if args.scaling.loss_scale_init.is_some() || args.scaling.loss_scale_interval.is_some() {
            return Err(anyhow!("--loss-scale-init and --loss-scale-interval set up loss scaling, which is off: add --loss-scale on"));
        }
        return Ok(None);
    }
    let base = saved.map_or_else(LossScaling::default, |s| s.settings());
    Ok(Some(LossScaling {
        init: args.scaling.loss_scale_init.unwrap_or(base.init),
        growth_interval: args.scaling.loss_scale_interval.unwrap_or(base.growth_interval),
    }))
}

/// `--augment`, refined by `--crop-padding` and `--hflip`; a resumed run's own by default.
pub fn augmentation(
    args: &Args,
    saved: Option<dpt_tui::engine::augment::Augment>,
) -> dpt_tui::engine::augment::Augment {
    let mut a = args.augmentation.augment.map(|p| p.augment()).or(saved).unwrap_or_default();
    if let Some(p) = args.augmentation.crop_padding {
        a.crop_padding = (p > 0).then_some(p);
    }
    if let Some(f) = args.augmentation.hflip {
        a.hflip = f == OnOff::On;
    }
    a
}
