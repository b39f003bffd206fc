//! `metrics.jsonl` on disk: the recorder thread appends records as they happen, and readers get
//! them back typed.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use super::Record;

/// The record's file name inside a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

/// `metrics.jsonl` cannot be written or read.
#[derive(Debug, Error)]
pub enum RecordFileError {
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
}

/// A record as written: the record's own fields and the time it was written.
#[derive(Serialize)]
struct Stamped<'a> {
    #[serde(flatten)]
    record: &'a Record,
    time: String,
}

/// Appends records to `metrics.jsonl`, flushed line by line so `tail -f` follows.
pub struct MetricsWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl MetricsWriter {
    /// Opens `dir/metrics.jsonl` for appending (a resumed run continues its file).
    pub fn create(dir: &Path) -> Result<Self, RecordFileError> {
        let path = dir.join(METRICS_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|cause| RecordFileError::Write { path: path.clone(), cause })?;
        Ok(MetricsWriter { path, out: BufWriter::new(file) })
    }

    /// Appends one record.
    pub fn write(&mut self, record: &Record) -> Result<(), RecordFileError> {
        let stamped = Stamped { record, time: chrono::Local::now().to_rfc3339() };
        let line = serde_json::to_string(&stamped).expect("records serialize to JSON");
        writeln!(self.out, "{line}")
            .and_then(|()| self.out.flush())
            .map_err(|cause| RecordFileError::Write { path: self.path.clone(), cause })
    }
}

/// The records of `dir/metrics.jsonl`, in order. A line that is not a record this version
/// knows (a kind added later, a line cut short by a crash) is skipped.
pub fn read_records(dir: &Path) -> Result<Vec<Record>, RecordFileError> {
    let path = dir.join(METRICS_FILE);
    let err = |cause| RecordFileError::Read { path: path.clone(), cause };
    let file = File::open(&path).map_err(err)?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(err)?;
        if let Ok(record) = serde_json::from_str::<Record>(&line) {
            out.push(record);
        }
    }
    Ok(out)
}

/// Starts the `dpt-recorder` thread: every record is appended to `metrics.jsonl` and then
/// forwarded, unchanged, to the returned receiver (the hub), so the file never depends on how
/// fast a screen is. The thread returns the first write error, if any, after the stream ends.
pub fn spawn_recorder(
    records: crossbeam_channel::Receiver<Record>,
    mut writer: MetricsWriter,
) -> std::io::Result<(crossbeam_channel::Receiver<Record>, std::thread::JoinHandle<Option<RecordFileError>>)>
{
    let (tx, rx) = crossbeam_channel::unbounded();
    let handle = std::thread::Builder::new().name("dpt-recorder".into()).spawn(move || {
        let mut first_error = None;
        for record in records {
            if let Err(e) = writer.write(&record) {
                first_error.get_or_insert(e);
            }
            // The consumer may have left; keep recording.
            let _ = tx.send(record);
        }
        first_error
    })?;
    Ok((rx, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Change;

    #[test]
    fn writes_stamped_lines_and_reads_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = MetricsWriter::create(dir.path()).unwrap();
        let records = vec![
            Record::Event(Change::Paused { global_step: 2 }),
            Record::Event(Change::Resumed { global_step: 2 }),
        ];
        for r in &records {
            w.write(r).unwrap();
        }
        drop(w);
        let text = std::fs::read_to_string(dir.path().join(METRICS_FILE)).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["kind"], "event");
        assert_eq!(first["event"], "paused");
        assert!(first["time"].as_str().is_some_and(|t| t.contains('T')), "{first}");
        // A torn last line (a crash mid-write) and unknown kinds are skipped.
        std::fs::write(
            dir.path().join(METRICS_FILE),
            format!("{text}{{\"kind\":\"later\"}}\n{{\"kind\":\"ev"),
        )
        .unwrap();
        assert_eq!(read_records(dir.path()).unwrap(), records);
    }
}
