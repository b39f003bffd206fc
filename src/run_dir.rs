//! The run directory: `metrics.jsonl` (one JSON record per line) and the saved weights.
//!
//! Record kinds: `start`, `step`, `epoch`, `event` (lr changes, pauses, saves, warnings,
//! failures) and a final `summary`. Later versions may add kinds and fields, never remove them.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use thiserror::Error;

use crate::engine::events::Event;

/// A run directory that cannot be used.
#[derive(Debug, Error)]
pub enum RunDirError {
    #[error("run directory {path} already holds a run ({file}); choose another --run-dir so nothing saved is overwritten")]
    Occupied { path: PathBuf, file: &'static str },
    #[error("cannot create run directory {path}: {cause}; choose a writable --run-dir")]
    Create { path: PathBuf, cause: std::io::Error },
    #[error("cannot write {path}: {cause}")]
    Write { path: PathBuf, cause: std::io::Error },
}

/// Names the default run directory `runs/<timestamp>-<model>`, adding `-2`, `-3`… if taken.
pub fn default_run_dir(model: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let base = PathBuf::from("runs").join(format!("{stamp}-{model}"));
    let mut candidate = base.clone();
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

/// Creates `path` (and its parents); refuses a folder that already holds a run.
pub fn create_run_dir(path: &Path) -> Result<(), RunDirError> {
    for file in ["metrics.jsonl", "model.safetensors"] {
        if path.join(file).exists() {
            return Err(RunDirError::Occupied { path: path.to_owned(), file });
        }
    }
    std::fs::create_dir_all(path).map_err(|cause| RunDirError::Create { path: path.to_owned(), cause })
}

/// Appends events to `metrics.jsonl` as records, flushed line by line so `tail -f` follows.
pub struct MetricsWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl MetricsWriter {
    /// Opens `dir/metrics.jsonl` for appending.
    pub fn create(dir: &Path) -> Result<Self, RunDirError> {
        let path = dir.join("metrics.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|cause| RunDirError::Write { path: path.clone(), cause })?;
        Ok(MetricsWriter { path, out: BufWriter::new(file) })
    }

    /// Writes the record for `event`.
    pub fn record(&mut self, event: &Event) -> Result<(), RunDirError> {
        let line = serde_json::to_string(&to_record(event)).expect("a JSON value always serializes");
        writeln!(self.out, "{line}")
            .and_then(|()| self.out.flush())
            .map_err(|cause| RunDirError::Write { path: self.path.clone(), cause })
    }
}

fn with_kind(kind: &str, value: Value) -> Value {
    let mut map = match value {
        Value::Object(map) => map,
        other => {
            let mut m = Map::new();
            m.insert("value".into(), other);
            m
        }
    };
    map.insert("kind".into(), Value::String(kind.into()));
    Value::Object(map)
}

fn value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("events serialize to JSON")
}

/// The `metrics.jsonl` record of an event.
pub fn to_record(event: &Event) -> Value {
    match event {
        Event::Started(info) => with_kind("start", value(info)),
        Event::Step(s) => with_kind("step", value(s)),
        Event::Epoch(e) => with_kind("epoch", value(e)),
        Event::Finished(summary) => with_kind("summary", value(summary)),
        // The history is already in this file (or in the original run's); record the position only.
        Event::Restored { epoch, step, global_step, .. } => json!({
            "kind": "event",
            "event": "restored",
            "epoch": epoch,
            "step": step,
            "global_step": global_step,
            "time": chrono::Local::now().to_rfc3339(),
        }),
        other => {
            let mut v = with_kind("event", value(other));
            if let Value::Object(map) = &mut v {
                map.insert("time".into(), json!(chrono::Local::now().to_rfc3339()));
            }
            v
        }
    }
}

/// Starts the `dpt-recorder` thread: every engine event is written to `metrics.jsonl` and then
/// forwarded, unchanged, to the returned receiver (the dashboard or the headless printer), so
/// the record never depends on how fast the screen is. The thread returns the first write
/// error, if any, after the stream ends.
pub fn spawn_recorder(
    events: crossbeam_channel::Receiver<Event>,
    mut writer: MetricsWriter,
) -> std::io::Result<(crossbeam_channel::Receiver<Event>, std::thread::JoinHandle<Option<RunDirError>>)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let handle = std::thread::Builder::new().name("dpt-recorder".into()).spawn(move || {
        let mut first_error = None;
        for event in events {
            if let Err(e) = writer.record(&event) {
                first_error.get_or_insert(e);
            }
            // The consumer may have left (the user quit the dashboard); keep recording.
            let _ = tx.send(event);
        }
        first_error
    })?;
    Ok((rx, handle))
}
