//! `metrics.jsonl` on disk: the recorder thread appends records as they happen, and readers get
//! them back typed.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use super::bottleneck::Diagnosis;
use super::tensorboard::TensorBoard;
use super::Record;
use crate::monitor::MonitorMsg;

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

/// What `parse` makes of each line of `dir/metrics.jsonl` it can read, in order.
fn read_lines<T>(dir: &Path, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, RecordFileError> {
    let path = dir.join(METRICS_FILE);
    let err = |cause| RecordFileError::Read { path: path.clone(), cause };
    let file = File::open(&path).map_err(err)?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        out.extend(parse(&line.map_err(err)?));
    }
    Ok(out)
}

/// The records of `dir/metrics.jsonl`, in order. A line that is not a record this version
/// knows (a kind added later, a line cut short by a crash) is skipped.
pub fn read_records(dir: &Path) -> Result<Vec<Record>, RecordFileError> {
    read_lines(dir, |line| serde_json::from_str::<Record>(line).ok())
}

/// The records of `dir/metrics.jsonl` with the time each was written (seconds since the Unix
/// epoch, when the line has one), skipping lines as [`read_records`] does.
pub fn read_timed_records(dir: &Path) -> Result<Vec<(Record, Option<f64>)>, RecordFileError> {
    read_lines(dir, |line| {
        let value = serde_json::from_str::<serde_json::Value>(line).ok()?;
        let time = value["time"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_micros() as f64 / 1e6);
        Some((serde_json::from_value::<Record>(value).ok()?, time))
    })
}

/// A run's `metrics.jsonl` followed as it grows: each read returns the records written since
/// the last, from where that one stopped (a long run's file is not read again whole).
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
        Tail { path: dir.join(METRICS_FILE), offset: 0, file: None }
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

/// The recorder's output: the records as written, the device readings passed on, and the
/// thread, which returns the first write error, if any, after the records end.
pub struct Recorder {
    pub records: crossbeam_channel::Receiver<Record>,
    pub readings: crossbeam_channel::Receiver<MonitorMsg>,
    pub thread: std::thread::JoinHandle<Option<RecordFileError>>,
}

/// Starts the `dpt-recorder` thread: every record is appended to `metrics.jsonl` and then
/// forwarded to [`Recorder::records`] (the hub), so the file never depends on how fast a
/// screen is. Each report window and the summary get their verdict on what limits the step
/// (see [`super::bottleneck`]) from the device `readings`, which pass on unchanged.
/// `tensorboard`, when given, gets every record too (see [`super::tensorboard`]); its first
/// failure is reported as the metrics' would be, and it is written no more.
pub fn spawn_recorder(
    records: crossbeam_channel::Receiver<Record>,
    readings: crossbeam_channel::Receiver<MonitorMsg>,
    mut writer: MetricsWriter,
    mut tensorboard: Option<TensorBoard>,
) -> std::io::Result<Recorder> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (readings_tx, readings_rx) = crossbeam_channel::unbounded();
    let thread = std::thread::Builder::new().name("dpt-recorder".into()).spawn(move || {
        let mut first_error = None;
        let mut diagnosis = Diagnosis::default();
        let mut readings = readings;
        loop {
            crossbeam_channel::select! {
                recv(records) -> record => {
                    let Ok(mut record) = record else { return first_error };
                    diagnosis.judge(&mut record);
                    if let Err(e) = writer.write(&record) {
                        first_error.get_or_insert(e);
                    }
                    if let Some(tb) = &mut tensorboard {
                        if let Err(cause) = tb.take(&record, diagnosis.devices(), crate::unix_now()) {
                            first_error.get_or_insert(RecordFileError::Write { path: tb.path().to_owned(), cause });
                            tensorboard = None;
                        }
                    }
                    // The consumer may have left; keep recording.
                    let _ = tx.send(record);
                }
                recv(readings) -> msg => match msg {
                    Ok(msg) => {
                        diagnosis.read(&msg);
                        let _ = readings_tx.send(msg);
                    }
                    Err(_) => readings = crossbeam_channel::never(),
                },
            }
        }
    })?;
    Ok(Recorder { records: rx, readings: readings_rx, thread })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_reads_what_was_added_and_a_replaced_file_from_its_start() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join(METRICS_FILE);
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

    #[test]
    fn the_recorder_gives_windows_and_the_summary_their_verdict_and_passes_readings_on() {
        use crate::monitor::{DeviceSample, MonitorMsg};
        use crate::record::{ReplicaTiming, StepStats, StepTiming, Summary};
        let dir = tempfile::tempdir().unwrap();
        let (records_tx, records) = crossbeam_channel::unbounded();
        let (readings_tx, readings) = crossbeam_channel::unbounded();
        let recorder =
            spawn_recorder(records, readings, MetricsWriter::create(dir.path()).unwrap(), None).unwrap();
        let reading = MonitorMsg::Samples(vec![DeviceSample::unavailable(
            crate::device::DeviceId::Cuda(0),
            "n/a".into(),
        )]);
        readings_tx.send(reading.clone()).unwrap();
        assert_eq!(recorder.readings.recv().unwrap(), reading, "readings pass on unchanged");
        let info =
            crate::record::RunInfo { devices: vec![crate::device::DeviceId::Cpu], ..Default::default() };
        let step = |data: f64| StepStats {
            timing: StepTiming { data, compute: 0.01, allreduce: 0.0, update: 0.0 },
            replicas: vec![ReplicaTiming { data, compute: 0.01 }],
            timed_steps: Some(5),
            ..StepStats::default()
        };
        records_tx.send(Record::Start(Box::new(info))).unwrap();
        records_tx.send(Record::Step(Box::new(step(0.03)))).unwrap();
        records_tx.send(Record::Step(Box::new(step(0.0)))).unwrap();
        let summary = Summary {
            model: crate::model::ModelKind::Lenet,
            devices: vec![crate::device::DeviceId::Cpu],
            test_acc: None,
            val_acc: None,
            sec_per_epoch: None,
            samples_per_sec: 1.0,
            epochs_done: 1,
            global_steps: 10,
            reason: crate::record::FinishReason::Completed,
            peak_rss_mib: None,
            val_loss: None,
            perplexity: None,
            tokens_per_sec: None,
            bottleneck: None,
            flops_per_sample: None,
            model_flops: None,
            mfu: None,
            peak_flops: None,
            peak_device_mib: Vec::new(),
        };
        records_tx.send(Record::Summary(Box::new(summary))).unwrap();
        drop(records_tx);
        assert!(recorder.thread.join().unwrap().is_none());
        let written = read_records(dir.path()).unwrap();
        let causes: Vec<_> = written
            .iter()
            .filter_map(|r| match r {
                Record::Step(s) => Some(s.bottleneck.as_ref().map(|b| b.cause)),
                Record::Summary(s) => Some(s.bottleneck.as_ref().map(|b| b.cause)),
                _ => None,
            })
            .collect();
        use crate::record::bottleneck::Cause;
        // 75 % waiting, then none, then over the run 60 % waiting: input-bound.
        assert_eq!(causes, [Some(Cause::Input), Some(Cause::Compute), Some(Cause::Input)]);
        assert_eq!(written.iter().filter(|r| matches!(r, Record::Step(_))).count(), 2);
        let forwarded: Vec<Record> = recorder.records.iter().collect();
        assert_eq!(forwarded, written, "the hub gets what was written");
    }
}
