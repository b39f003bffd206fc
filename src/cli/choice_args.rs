//! The model-choice flags: the best evaluations kept, by which metric, and the early stop.

use super::values::parse;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChoiceArgs {
    /// Keep the K best evaluations (by --best-metric) as weights and checkpoints in the run
    /// directory's best/epoch-E/ [default: 0].
    #[arg(long, value_name = "K")]
    pub keep_best: Option<usize>,

    /// What best means: val_acc (the evaluated set's accuracy) or val_loss [default: val_acc].
    #[arg(long, value_name = "METRIC", value_parser = parse::<dpt_tui::engine::best::BestMetric>)]
    pub best_metric: Option<dpt_tui::engine::best::BestMetric>,

    /// Stop when --best-metric has not improved for N evaluations (one per epoch).
    #[arg(long, value_name = "N")]
    pub early_stop: Option<usize>,
}
