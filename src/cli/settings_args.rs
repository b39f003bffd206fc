//! The settings' flags, grouped as the settings tree is and each group under its own `--help`
//! heading. A group's fields are named as the tree's keys (the flag's name is given where it
//! differs), so the flags given serialize into a partial tree: the top layer of
//! `dpt_tui::settings::Layers`. A flag not given is absent, never a value.

use serde::Serialize;

pub use super::settings_groups::{
    BestArgs, CheckpointArgs, DataArgs, ModelArgs, OptimizerArgs, PlacementArgs, PrecisionArgs, RecipeArgs,
    ScheduleArgs,
};

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct SettingsArgs {
    #[command(flatten, next_help_heading = "Model")]
    pub model: ModelArgs,
    #[command(flatten, next_help_heading = "Data")]
    pub data: DataArgs,
    #[command(flatten, next_help_heading = "Optimizer")]
    pub optimizer: OptimizerArgs,
    #[command(flatten, next_help_heading = "Learning-rate schedule")]
    pub schedule: ScheduleArgs,
    #[command(flatten, next_help_heading = "Recipe")]
    pub recipe: RecipeArgs,
    #[command(flatten, next_help_heading = "Best evaluations")]
    pub best: BestArgs,
    #[command(flatten, next_help_heading = "Precision")]
    pub precision: PrecisionArgs,
    #[command(flatten, next_help_heading = "Checkpoints")]
    pub checkpoints: CheckpointArgs,
    #[command(flatten, next_help_heading = "Placement: devices, threads, loader, timeouts, cadence")]
    pub placement: PlacementArgs,
}

impl SettingsArgs {
    /// The flags given, as a partial settings tree.
    #[cfg_attr(not(feature = "train"), allow(dead_code))]
    pub fn layer(&self) -> Result<toml::Value, dpt_tui::settings::SettingsError> {
        dpt_tui::settings::layer(self)
    }
}

/// Serde's test for a switch that was not given.
pub(super) fn not_set(on: &bool) -> bool {
    !*on
}
