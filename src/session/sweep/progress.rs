//! A running trial's records as the sweep follows them: its `metrics.jsonl` read from where the
//! last reading stopped (a long run's file is not read again whole). The pruner keeps each
//! epoch record's value of its metric ([`Progress`]); the board folds them into curves.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use dpt_core::best::BestMetric;
use dpt_tui::record::Record;
use dpt_tui::sweep::prune::Curve;

/// The records of a run's `metrics.jsonl` not read yet.
pub struct Tail {
    path: PathBuf,
    /// Bytes of the file read and parsed (whole lines only).
    offset: u64,
}

impl Tail {
    /// The records of the run in `dir`, none read yet.
    pub fn of(dir: &Path) -> Tail {
        Tail { path: dir.join("metrics.jsonl"), offset: 0 }
    }

    /// The records written since the last call. A line not yet whole is left for the next
    /// call; a file not there yet has none.
    pub fn read(&mut self) -> Vec<Record> {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return Vec::new() };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            return Vec::new();
        }
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        text[..whole].lines().filter_map(|line| serde_json::from_str::<Record>(line).ok()).collect()
    }
}

/// One trial's epoch values so far.
pub struct Progress {
    tail: Tail,
    pub curve: Curve,
}

impl Progress {
    /// The progress of the run in `dir`, nothing read yet.
    pub fn of(dir: &Path) -> Progress {
        Progress { tail: Tail::of(dir), curve: Curve::default() }
    }

    /// Reads the records written since the last call; whether an epoch's value was added.
    pub fn read(&mut self, metric: BestMetric) -> bool {
        let before = self.curve.values.len();
        for record in self.tail.read() {
            if let Record::Epoch(e) = record {
                // A continued run starts its epoch again: its value replaces the earlier one.
                self.curve.values.truncate(e.epoch.saturating_sub(1));
                self.curve.values.push(metric.of(e.test_loss, e.test_acc));
            }
        }
        self.curve.values.len() > before
    }
}
