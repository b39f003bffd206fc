//! Baselines in the live dashboard: `b` lists the recorded runs beside this one (the run
//! directory's neighbours), Enter or space overlays the one under the cursor as a baseline (or
//! takes it off again), Esc or `b` closes the list.

use std::path::{Path, PathBuf};

use crossterm::event::KeyCode;

use super::app::{App, Overlay};
use crate::record::compare::Baseline;
use crate::record::history::History;
use crate::record::text::Level;
use crate::remote::runs::{self, RunStatus};

/// The name a baseline goes by: its run directory's.
pub fn run_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// A recorded run as a baseline.
pub fn load(path: &Path) -> Result<Baseline, String> {
    let history = History::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Baseline::of(run_name(path), history.records()))
}

impl App {
    /// Opens the list of runs beside this one (those not running).
    pub fn open_baselines(&mut self) {
        let Some(dir) = self.curves.run_dir.as_ref().and_then(|d| d.parent()) else {
            self.note(Level::Warn, "no run directory: nothing to compare with");
            return;
        };
        let own = self.curves.run_dir.as_deref().map(runs::absolute);
        let entries: Vec<PathBuf> = runs::list(dir)
            .into_iter()
            .filter(|e| e.state != RunStatus::Running && Some(&e.path) != own.as_ref())
            .map(|e| e.path)
            .collect();
        if entries.is_empty() {
            self.note(Level::Info, format!("no finished runs beside this one in {}", dir.display()));
            return;
        }
        self.overlay = Some(Overlay::Baselines { entries, cursor: 0 });
    }

    /// A key while the list is open.
    pub(super) fn baselines_key(&mut self, code: KeyCode, entries: Vec<PathBuf>, mut cursor: usize) {
        match code {
            KeyCode::Esc | KeyCode::Char('b') | KeyCode::Char('q') => return,
            KeyCode::Up | KeyCode::Char('k') => cursor = cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => cursor = (cursor + 1).min(entries.len().saturating_sub(1)),
            KeyCode::Enter | KeyCode::Char(' ') => {
                if let Some(path) = entries.get(cursor) {
                    self.toggle_baseline(path);
                }
            }
            _ => {}
        }
        self.overlay = Some(Overlay::Baselines { entries, cursor });
    }

    /// Overlays the run at `path`, or takes it off if it is overlaid.
    pub fn toggle_baseline(&mut self, path: &Path) {
        let name = run_name(path);
        if let Some(i) = self.curves.baselines.iter().position(|b| b.name == name) {
            self.curves.baselines.remove(i);
            return;
        }
        match load(path) {
            Ok(b) => self.curves.baselines.push(b),
            Err(e) => self.note(Level::Warn, format!("cannot overlay {name}: {e}")),
        }
    }
}
