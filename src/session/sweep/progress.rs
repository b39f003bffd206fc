//! A running trial's progress as the pruner reads it: its `metrics.jsonl` read from where the
//! last reading stopped (a long run's file is not read again whole), each epoch record's value
//! of the metric kept.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use dpt_core::best::BestMetric;
use dpt_tui::record::Record;
use dpt_tui::sweep::prune::Curve;

/// One trial's epoch values so far.
pub struct Progress {
    path: PathBuf,
    /// Bytes of the file read and parsed (whole lines only).
    offset: u64,
    pub curve: Curve,
}

impl Progress {
    /// The progress of the run in `dir`, nothing read yet.
    pub fn of(dir: &Path) -> Progress {
        Progress { path: dir.join("metrics.jsonl"), offset: 0, curve: Curve::default() }
    }

    /// Reads the lines written since the last call; whether an epoch's value was added. A
    /// line not yet whole is left for the next call; a file not there yet is no epoch.
    pub fn read(&mut self, metric: BestMetric) -> bool {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return false };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return false;
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            return false;
        }
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        let before = self.curve.values.len();
        for line in text[..whole].lines() {
            if let Ok(Record::Epoch(e)) = serde_json::from_str::<Record>(line) {
                // A continued run starts its epoch again: its value replaces the earlier one.
                self.curve.values.truncate(e.epoch.saturating_sub(1));
                self.curve.values.push(metric.of(e.test_loss, e.test_acc));
            }
        }
        self.curve.values.len() > before
    }
}
