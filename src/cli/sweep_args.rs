//! The flags of a sweep (`session::sweep`): what it sweeps, how many trials, how it stops
//! them early and where they run. None is a setting of a run: they make many runs.

use super::values::parse;
use dpt_tui::sweep::prune::Prune;

#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// Run a sweep: one trial per combination of the values of every `--sweep` (a setting's key,
    /// `optimizer.lr`, or its flag's name, `lr`; values as a list `0.05,0.1`, integers `1..5`,
    /// or `log:1e-4..1e-2:5` / `lin:0.1..0.5:5`). Each trial is a run of its own in the folder
    /// --run-dir names; the same command run again continues the sweep.
    #[arg(long, help_heading = "Sweeps", value_name = "KEY=VALUES")]
    pub sweep: Vec<String>,

    /// Run N trials drawn at random (by --seed) from the --sweep values' combinations.
    #[arg(long, help_heading = "Sweeps", value_name = "N", requires = "sweep")]
    pub sweep_random: Option<usize>,

    /// Stop trials that fall behind, as Optuna's pruners: `median` (once 5 trials finished, a
    /// trial below their median at an epoch) or `asha` (successive halving at epochs 1, 4,
    /// 16…, the best quarter going on); `none` runs every trial to its end.
    #[arg(long, help_heading = "Sweeps", value_name = "RULE", default_value = "none", value_parser = parse::<Prune>)]
    pub prune: Prune,

    /// The most trials a sweep may make.
    #[arg(long, help_heading = "Sweeps", value_name = "N", default_value_t = 256)]
    pub max_trials: usize,

    /// Devices per trial: GPUs on a GPU machine [default: 1], cores on the CPU [default: the
    /// cores shared by up to 4 trials at once]; as many trials run at once as fit.
    #[arg(long, help_heading = "Sweeps", value_name = "N", requires = "sweep", value_parser = clap::value_parser!(u64).range(1..))]
    pub trial_devices: Option<u64>,
}
