//! A running trial's records as the sweep follows them: its `metrics.jsonl` read from where the
//! last reading stopped (a long run's file is not read again whole). The pruner keeps each
//! epoch record's value of its metric (`pruning::Progress`); the board folds them into curves.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use dpt_tui::record::Record;

/// The records of a run's `metrics.jsonl` not read yet.
pub struct Tail {
    path: PathBuf,
    /// Bytes of the file read and parsed (whole lines only).
    offset: u64,
    /// The file read (its inode): another file there (a retried trial's, its failed attempt
    /// moved aside) is read from its start.
    file: Option<u64>,
}

/// What a [`Tail`] read.
pub struct Lines {
    /// The file is another than the one read before: these records start it again.
    pub restarted: bool,
    pub records: Vec<Record>,
}

impl Tail {
    /// The records of the run in `dir`, none read yet.
    pub fn of(dir: &Path) -> Tail {
        Tail { path: dir.join("metrics.jsonl"), offset: 0, file: None }
    }

    /// The records written since the last call. A line not yet whole is left for the next
    /// call; a file not there yet has none.
    pub fn read(&mut self) -> Lines {
        use std::os::unix::fs::MetadataExt;
        let none = |restarted| Lines { restarted, records: Vec::new() };
        let Ok(mut file) = std::fs::File::open(&self.path) else { return none(false) };
        let Ok(meta) = file.metadata() else { return none(false) };
        let restarted = self.file.is_some_and(|ino| ino != meta.ino()) || meta.len() < self.offset;
        if restarted {
            self.offset = 0;
        }
        self.file = Some(meta.ino());
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return none(restarted);
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            return none(restarted);
        }
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        let records =
            text[..whole].lines().filter_map(|line| serde_json::from_str::<Record>(line).ok()).collect();
        Lines { restarted, records }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_reads_what_was_added_and_a_replaced_file_from_its_start() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("metrics.jsonl");
        let line = |step: usize| {
            format!("{{\"kind\":\"event\",\"event\":\"stop_requested\",\"global_step\":{step}}}\n")
        };
        std::fs::write(&path, line(1) + &line(2) + "{\"kind\":").expect("written");
        let mut tail = Tail::of(dir.path());
        let read = tail.read();
        assert_eq!((read.restarted, read.records.len()), (false, 2), "a line not whole waits");
        assert!(tail.read().records.is_empty());
        // A retried trial: the earlier attempt's file moved aside, a new one in its place.
        std::fs::rename(&path, dir.path().join("earlier.jsonl")).expect("moved");
        std::fs::write(&path, line(7)).expect("written");
        let read = tail.read();
        assert!(read.restarted);
        assert!(matches!(read.records.as_slice(), [Record::Event(_)]), "{:?}", read.records);
    }
}
