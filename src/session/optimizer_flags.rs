//! The optimizer's flags over a run's settings (the model's defaults, or a checkpoint's).

use anyhow::anyhow;

use crate::cli::Args;
use dpt_tui::engine::optim::{OptimConfig, OptimizerKind};

/// The optimizer flags over `optim` (the model's defaults, or a checkpoint's settings); a
/// resumed run keeps its optimizer (`resumed`), since its state belongs to that one.
pub fn apply(
    args: &Args,
    optim: &mut OptimConfig,
    resumed: Option<OptimizerKind>,
) -> Result<(), anyhow::Error> {
    if let (Some(asked), Some(was)) = (args.optimizer, resumed) {
        if asked != was {
            return Err(anyhow!(
                "the checkpoint was trained with --optimizer {was}, not {asked}; drop --optimizer to continue it"
            ));
        }
    }
    if let Some(kind) = args.optimizer {
        if kind != optim.kind {
            // Adam and AdamW are used without SGD's momentum.
            optim.momentum = 0.0;
        }
        optim.kind = kind;
    }
    optim.lr = args.lr.unwrap_or(optim.lr);
    optim.momentum = args.momentum.unwrap_or(optim.momentum);
    optim.weight_decay = args.weight_decay.unwrap_or(optim.weight_decay);
    optim.nesterov |= args.nesterov;
    optim.betas = args.betas.unwrap_or(optim.betas);
    optim.eps = args.eps.unwrap_or(optim.eps);
    optim.decay_all |= args.decay_all;
    if optim.kind != OptimizerKind::Sgd && args.momentum.is_some() {
        return Err(anyhow!("--momentum is for --optimizer sgd; {} uses --betas", optim.kind));
    }
    let adam_only = args.betas.is_some() || args.eps.is_some() || args.decay_all;
    if optim.kind == OptimizerKind::Sgd && adam_only {
        return Err(anyhow!("--betas, --eps and --decay-all are for --optimizer adam or adamw"));
    }
    Ok(())
}
