//! `dpt-tui … --sweep KEY=VALUES`: many runs from one command. The plan (`plan.rs`) makes the
//! trials and checks every one first; here the sweep's folder is claimed (or continued) and
//! the sweep runs in the foreground or detached; `runner.rs` runs the trials, each a normal run
//! of its own started as a child process in the sweep's folder, as many at once as the machine
//! has places for (`--trial-devices`), the next starting as one ends. `sweep.json` keeps every trial's state,
//! rewritten at each change, so the same command run again (after a kill, a reboot, a requeue)
//! keeps the finished trials, continues the interrupted ones from their checkpoints (a trial's
//! run directory continues as any run's does) and starts the rest. A line per trial event, and
//! the table of trials at the end (`table.rs`, which `dpt-tui show SWEEP` prints too). With
//! `--prune`, trials that fall behind are stopped early (`pruning.rs`).

pub mod table;
pub mod watch;
dpt_tui::training! {
    mod hparams;
    mod outcome;
    mod place;
    mod plan;
    mod pruning;
    mod runner;
    mod start;
}

use std::path::Path;

use anyhow::anyhow;

use crate::Failure;
use dpt_tui::sweep::{SweepFile, SweepFileError};
#[cfg(feature = "train")]
pub use start::run;

use super::input;

/// The `sweep.json` of the sweep in `folder`, if it has one.
fn read_state(folder: &Path) -> Result<Option<SweepFile>, Failure> {
    SweepFile::read(folder).map_err(|e| match e {
        SweepFileError::NotASweep { .. } => input(anyhow!("{e}; name another --run-dir")),
        other => input(other),
    })
}

/// Whether process `pid` is a sweep's (its command line has `--sweep`).
pub fn sweep_runs(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    cmdline.split(|&b| b == 0).any(|arg| arg == b"--sweep" || arg.starts_with(b"--sweep="))
}
