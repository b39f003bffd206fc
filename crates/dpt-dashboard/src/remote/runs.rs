//! Runs on disk and live: their state for `dpt-tui ls` and a bare `dpt-tui attach`. Reading a
//! run never changes it.

use std::path::{Path, PathBuf};

use super::client::is_live;
use super::registry::{self, ServerInfo};
use crate::record::history::History;
use crate::record::{Change, FinishReason, Record, RunInfo};
use crate::run_dir::CHECKPOINT_FILE;

/// Where a recorded run stands, as `ls` lists it (the dashboard's live view of one is
/// `dashboard::app::RunState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Finished,
    /// Stopped before its last epoch (by the user, a signal, a step limit or divergence).
    Stopped,
    Failed,
    /// Its process is gone without finishing (crashed or killed).
    Dead,
}

impl RunStatus {
    pub fn label(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Stopped => "stopped",
            RunStatus::Failed => "failed",
            RunStatus::Dead => "dead",
        }
    }
}

/// One line of `dpt-tui ls`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    /// The run directory, absolute.
    pub path: PathBuf,
    pub state: RunStatus,
    pub resumable: bool,
    /// The model's name, or a script's label.
    pub label: Option<String>,
    /// The devices as the run named them (`cuda:0`; a script's ranks' own, `mps` included).
    pub devices: Vec<String>,
    pub epochs_done: usize,
    pub epochs: usize,
    /// A run measured in steps: the last step recorded and the run's length (a script's, where
    /// it said).
    pub steps: Option<(usize, Option<usize>)>,
    pub best: Option<crate::record::compare::Best>,
    /// Seconds since the Unix epoch of the last record, for ordering.
    pub modified: u64,
}

/// `path` made absolute (and canonical where it exists), for printing and comparing.
pub fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().or_else(|_| std::path::absolute(path)).unwrap_or_else(|_| path.to_owned())
}

/// The state of the run in `dir`, or `None` if it is not a run directory.
pub fn inspect(dir: &Path) -> Option<RunEntry> {
    let history = History::read(dir).ok()?;
    let records = history.records();
    let modified = std::fs::metadata(dir.join(crate::record::file::METRICS_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    // A resumed run appends: what counts is what follows its last start.
    let last_start = records.iter().rposition(|r| matches!(r, Record::Start(_))).unwrap_or(0);
    let current = &records[last_start..];
    let info = records.iter().rev().find_map(|r| if let Record::Start(i) = r { Some(i) } else { None });
    let epochs = || records.iter().filter_map(|r| if let Record::Epoch(e) = r { Some(e) } else { None });
    let epochs_done = epochs().map(|e| e.epoch).max().unwrap_or(0);
    let summary =
        current.iter().rev().find_map(|r| if let Record::Summary(s) = r { Some(s.reason) } else { None });
    let failed = current.iter().any(|r| matches!(r, Record::Event(Change::Failed { .. })));
    let state = match summary {
        Some(FinishReason::Completed) => RunStatus::Finished,
        Some(_) => RunStatus::Stopped,
        None if is_live(dir) => RunStatus::Running,
        None if failed => RunStatus::Failed,
        None => RunStatus::Dead,
    };
    let resumable =
        state != RunStatus::Running && state != RunStatus::Finished && dir.join(CHECKPOINT_FILE).exists();
    Some(RunEntry {
        path: absolute(dir),
        state,
        resumable,
        label: info.map(|i| i.model_label()),
        devices: info.map_or(Vec::new(), |i| device_labels(i)),
        epochs_done,
        epochs: info.map_or(0, |i| i.epochs()),
        steps: info.and_then(|i| match &i.script {
            Some(script) => Some((last_step(records), script.total_steps)),
            None => i.settings.recipe.steps.map(|n| (last_step(records), Some(n))),
        }),
        best: crate::record::compare::Best::of(records),
        modified,
    })
}

/// The last step recorded (0 before any).
fn last_step(records: &[Record]) -> usize {
    records
        .iter()
        .rev()
        .find_map(|r| if let Record::Step(s) = r { Some(s.global_step) } else { None })
        .unwrap_or(0)
}

/// The run's devices as named: a script's as its ranks reported them, each named once.
fn device_labels(info: &RunInfo) -> Vec<String> {
    match &info.script {
        Some(script) => {
            let mut labels: Vec<String> = Vec::new();
            for label in script.devices.iter().map(|d| d.label()) {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            labels
        }
        None => info.devices.iter().map(ToString::to_string).collect(),
    }
}

/// The runs in the folders under `root`, most recent first.
pub fn list(root: &Path) -> Vec<RunEntry> {
    let mut runs: Vec<RunEntry> = std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).filter_map(|p| inspect(&p)).collect())
        .unwrap_or_default();
    runs.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| b.path.cmp(&a.path)));
    runs
}

/// What `dpt-tui ls` shows: the user's live jobs, wherever they run, then the runs under
/// `root` that are not among them; and how many dead jobs left entries behind.
pub struct Listing {
    pub runs: Vec<RunEntry>,
    pub stale: usize,
}

/// The listing for `dpt-tui ls root`.
pub fn listing(root: &Path) -> Listing {
    let entries = registry::entries();
    let (live, stale): (Vec<ServerInfo>, Vec<ServerInfo>) =
        entries.into_iter().partition(ServerInfo::answers);
    let mut runs: Vec<RunEntry> = live.iter().filter_map(|j| inspect(&j.run_dir)).collect();
    for r in list(root) {
        if !runs.iter().any(|l| l.path == r.path) {
            runs.push(r);
        }
    }
    Listing { runs, stale: stale.len() }
}

/// The most recently started live job of this user, from any directory.
pub fn latest_live() -> Option<PathBuf> {
    registry::live_jobs().into_iter().next().map(|j| j.run_dir)
}

/// The run a user names: a path, or the folder name of one of their live jobs.
pub fn resolve(name: &Path) -> PathBuf {
    if name.exists() {
        return absolute(name);
    }
    registry::live_jobs()
        .into_iter()
        .map(|j| j.run_dir)
        .find(|d| d.file_name().is_some_and(|n| Path::new(n) == name))
        .unwrap_or_else(|| absolute(name))
}
