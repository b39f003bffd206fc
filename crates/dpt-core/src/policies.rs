//! The policies a run follows when something goes wrong on its way: a loss that stops being
//! finite, a final save that fails.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What to do when the training loss stops being finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnNan {
    /// Pause with a warning (the dashboard's default).
    Pause,
    /// Stop without overwriting the last good checkpoint (the headless default).
    Stop,
    /// Warn once and go on.
    Ignore,
}

/// What to do when the final save (the weights and checkpoint written when a run ends or
/// stops) fails, e.g. on a full disk. The weights are in memory until the process ends; the run
/// never ends as if done without them on disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SavePolicy {
    /// Pause and wait for the user: `s` (`SaveNow`) retries, `SaveTo` another folder, a second
    /// stop gives up and fails the run (the dashboard and background jobs).
    WaitForUser,
    /// Try again `tries` more times, `every` apart, then fail the run (headless).
    Retry { tries: u32, every: Duration },
}

crate::names!(OnNan, "policy", { Pause => "pause", Stop => "stop", Ignore => "ignore" });
