//! Runs on disk: their state for `dpt-tui ls`, and their history read back from
//! `metrics.jsonl` for `dpt-tui show`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::client::{is_live, server_info};
use super::server::SERVER_FILE;
use crate::engine::checkpoint::CHECKPOINT_FILE;
use crate::engine::events::{EpochStats, RunInfo, StepStats, Summary};
use crate::engine::{Event, FinishReason};

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Running,
    Finished,
    /// Stopped before its last epoch (by the user, a signal, a step limit or divergence).
    Stopped,
    Failed,
    /// Its process is gone without finishing (crashed or killed).
    Dead,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Stopped => "stopped",
            RunState::Failed => "failed",
            RunState::Dead => "dead",
        }
    }
}

/// One line of `dpt-tui ls`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    pub path: PathBuf,
    pub state: RunState,
    pub resumable: bool,
    pub model: String,
    pub devices: Vec<String>,
    pub epochs_done: usize,
    pub epochs: usize,
    pub best_test_acc: Option<f64>,
    /// Seconds since the epoch of the last record, for ordering.
    pub modified: u64,
}

/// The events recorded in `run_dir/metrics.jsonl`, in order. Lines that are not records of this
/// version are skipped.
pub fn read_history(run_dir: &Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl"))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(record_to_event)
        .collect())
}

fn record_to_event(v: Value) -> Option<Event> {
    Some(match v.get("kind")?.as_str()? {
        "start" => Event::Started(Box::new(serde_json::from_value::<RunInfo>(v).ok()?)),
        "step" => Event::Step(Box::new(serde_json::from_value::<StepStats>(v).ok()?)),
        "epoch" => Event::Epoch(Box::new(serde_json::from_value::<EpochStats>(v).ok()?)),
        "summary" => Event::Finished(Box::new(serde_json::from_value::<Summary>(v).ok()?)),
        "event" => serde_json::from_value::<Event>(v).ok()?,
        _ => return None,
    })
}

/// The state of the run in `dir`, or `None` if it is not a run directory. A socket left by a
/// crashed process is removed on the way.
pub fn inspect(dir: &Path) -> Option<RunEntry> {
    let history = read_history(dir).ok()?;
    let modified = std::fs::metadata(dir.join("metrics.jsonl"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    // A resumed run appends: what counts is what follows its last start.
    let last_start = history.iter().rposition(|e| matches!(e, Event::Started(_))).unwrap_or(0);
    let current = &history[last_start..];
    let info =
        history.iter().rev().find_map(|e| if let Event::Started(i) = e { Some(i.clone()) } else { None });
    let epochs_done = history
        .iter()
        .filter_map(|e| if let Event::Epoch(s) = e { Some(s.epoch) } else { None })
        .max()
        .unwrap_or(0);
    let best_test_acc = history
        .iter()
        .filter_map(|e| if let Event::Epoch(s) = e { Some(s.test_acc) } else { None })
        .fold(None, |best: Option<f64>, a| Some(best.map_or(a, |b| b.max(a))));
    let summary =
        current.iter().rev().find_map(|e| if let Event::Finished(s) = e { Some(s.reason) } else { None });
    let failed = current.iter().any(|e| matches!(e, Event::Failed { .. }));
    let state = match summary {
        Some(FinishReason::Completed) => RunState::Finished,
        Some(_) => RunState::Stopped,
        None if is_live(dir) => RunState::Running,
        None if failed => RunState::Failed,
        None => {
            if let Some(info) = server_info(dir) {
                let _ = std::fs::remove_file(&info.socket);
                let _ = std::fs::remove_file(dir.join(SERVER_FILE));
            }
            RunState::Dead
        }
    };
    let resumable =
        state != RunState::Running && state != RunState::Finished && dir.join(CHECKPOINT_FILE).exists();
    Some(RunEntry {
        path: dir.to_owned(),
        state,
        resumable,
        model: info.as_ref().map_or("?".into(), |i| i.model.clone()),
        devices: info.as_ref().map_or(Vec::new(), |i| i.devices.clone()),
        epochs_done,
        epochs: info.as_ref().map_or(0, |i| i.epochs),
        best_test_acc,
        modified,
    })
}

/// The runs in the folders under `root`, most recent first.
pub fn list(root: &Path) -> Vec<RunEntry> {
    let mut runs: Vec<RunEntry> = std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).filter_map(|p| inspect(&p)).collect())
        .unwrap_or_default();
    runs.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| b.path.cmp(&a.path)));
    runs
}

/// The most recent running job under `root`, else the most recent run.
pub fn latest(root: &Path) -> Option<PathBuf> {
    let runs = list(root);
    runs.iter().find(|r| r.state == RunState::Running).or(runs.first()).map(|r| r.path.clone())
}
