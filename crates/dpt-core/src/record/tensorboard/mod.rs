//! TensorBoard event files beside `metrics.jsonl` (`RUN/tensorboard/`), so `tensorboard --logdir
//! runs` shows every run and the tools that import TensorBoard logs (W&B's `--sync-tensorboard`,
//! MLflow) take them. A file is a sequence of TFRecords, each an `Event` protocol buffer framed
//! by its length and the masked CRC-32C the format requires (TensorFlow's `record_writer.cc`);
//! the messages are the few fields of TensorFlow's `event.proto` and `summary.proto`, and of the
//! HParams plugin's `plugin_data.proto`, that scalars and hyperparameters need, encoded by
//! `prost`. What goes in is [`scalars::Scalars`]'s.

mod proto;
pub mod scalars;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::monitor::DeviceSample;
use crate::record::Record;
use scalars::Scalars;

use proto::{
    Event, Experiment, HParamInfo, HParamsPluginData, ListValue, MetricInfo, MetricName, PluginData,
    ProtoValue, SessionEndInfo, SessionStartInfo, Summary, SummaryMetadata, Value,
};

/// The event files' folder inside a run directory.
pub const TENSORBOARD_DIR: &str = "tensorboard";

/// The tags TensorBoard's HParams plugin reads a run's hyperparameters, its end, and an
/// experiment's table from.
const SESSION_START_TAG: &str = "_hparams_/session_start_info";
const SESSION_END_TAG: &str = "_hparams_/session_end_info";
const EXPERIMENT_TAG: &str = "_hparams_/experiment";

/// How a session (a sweep's trial) ended, as the HParams plugin's `Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    Success = 1,
    Failure = 2,
}

/// One hyperparameter's value.
#[derive(Debug, Clone, PartialEq)]
pub enum HParam {
    Number(f64),
    Text(String),
    Bool(bool),
}

/// An event file being appended to.
pub struct EventFile {
    path: PathBuf,
    out: BufWriter<File>,
}

/// CRC-32C, rotated and offset as TFRecord masks it (so a CRC of data holding CRCs stays
/// distinct).
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

impl EventFile {
    /// A new event file in `run_dir/tensorboard/`, named as TensorBoard's writers name theirs
    /// (`events.out.tfevents.<seconds>.<host>.<pid>`; one per attempt of a run), opened by the
    /// file-version event.
    pub fn create(run_dir: &Path, wall_time: f64, host: &str) -> std::io::Result<EventFile> {
        let dir = run_dir.join(TENSORBOARD_DIR);
        std::fs::create_dir_all(&dir)?;
        let name = format!("events.out.tfevents.{}.{host}.{}", wall_time as u64, std::process::id());
        let path = dir.join(name);
        let out = BufWriter::new(File::options().create_new(true).write(true).open(&path)?);
        let mut file = EventFile { path, out };
        file.write(&Event { wall_time, file_version: Some("brain.Event:2".into()), ..Event::default() })?;
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, event: &Event) -> std::io::Result<()> {
        let data = event.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc(&len).to_le_bytes())?;
        self.out.write_all(&data)?;
        self.out.write_all(&masked_crc(&data).to_le_bytes())?;
        // Flushed record by record, as metrics.jsonl is: TensorBoard reloads while the run goes.
        self.out.flush()
    }

    /// Scalars of one step.
    pub fn scalars(&mut self, step: i64, wall_time: f64, values: &[(String, f32)]) -> std::io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let value = values
            .iter()
            .map(|(tag, v)| Value { tag: tag.clone(), simple_value: Some(*v), metadata: None })
            .collect();
        self.write(&Event { wall_time, step, summary: Some(Summary { value }), ..Event::default() })
    }

    /// The run's hyperparameters, as the HParams plugin's session start.
    pub fn hparams(&mut self, wall_time: f64, hparams: &BTreeMap<String, HParam>) -> std::io::Result<()> {
        let values = hparams.iter().map(|(k, v)| (k.clone(), ProtoValue::from(v))).collect();
        let data = HParamsPluginData {
            session_start_info: Some(SessionStartInfo { hparams: values, start_time_secs: wall_time }),
            ..HParamsPluginData::default()
        };
        self.plugin_data(wall_time, SESSION_START_TAG, &data)
    }

    /// A session's end (a sweep's trial), for the HParams plugin's status column.
    pub fn session_end(&mut self, wall_time: f64, status: SessionStatus) -> std::io::Result<()> {
        let end = SessionEndInfo { status: status as i32, end_time_secs: wall_time };
        let data = HParamsPluginData { session_end_info: Some(end), ..HParamsPluginData::default() };
        self.plugin_data(wall_time, SESSION_END_TAG, &data)
    }

    /// A sweep's experiment: the hyperparameters swept, each with the values it takes, and the
    /// metric tags, which are what the HParams plugin's table shows of every session.
    pub fn experiment(
        &mut self,
        wall_time: f64,
        hparams: &[(String, Vec<HParam>)],
        metrics: &[String],
    ) -> std::io::Result<()> {
        let hparam_infos = hparams
            .iter()
            .map(|(name, values)| HParamInfo {
                name: name.clone(),
                r#type: match values.first() {
                    Some(HParam::Number(_)) => 3,
                    Some(HParam::Bool(_)) => 2,
                    _ => 1,
                },
                domain_discrete: Some(ListValue { values: values.iter().map(ProtoValue::from).collect() }),
            })
            .collect();
        let metric_infos = metrics
            .iter()
            .map(|tag| MetricInfo { name: Some(MetricName { group: String::new(), tag: tag.clone() }) })
            .collect();
        let experiment = Experiment { time_created_secs: wall_time, hparam_infos, metric_infos };
        let data = HParamsPluginData { experiment: Some(experiment), ..HParamsPluginData::default() };
        self.plugin_data(wall_time, EXPERIMENT_TAG, &data)
    }

    fn plugin_data(&mut self, wall_time: f64, tag: &str, data: &HParamsPluginData) -> std::io::Result<()> {
        let content = data.encode_to_vec();
        let metadata =
            SummaryMetadata { plugin_data: Some(PluginData { plugin_name: "hparams".into(), content }) };
        let value = vec![Value { tag: tag.into(), simple_value: None, metadata: Some(metadata) }];
        self.write(&Event { wall_time, summary: Some(Summary { value }), ..Event::default() })
    }
}

/// A run's event file and what it takes from the record.
pub struct TensorBoard {
    file: EventFile,
    scalars: Scalars,
}

impl TensorBoard {
    /// A new event file for `run_dir` (see [`EventFile::create`]).
    pub fn create(run_dir: &Path, wall_time: f64, host: &str) -> std::io::Result<TensorBoard> {
        Ok(TensorBoard { file: EventFile::create(run_dir, wall_time, host)?, scalars: Scalars::default() })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Writes what `record` adds, at `wall_time` (seconds since the Unix epoch); `devices` are
    /// every device's latest readings.
    pub fn take(&mut self, record: &Record, devices: &[DeviceSample], wall_time: f64) -> std::io::Result<()> {
        if let Record::Start(info) = record {
            self.file.hparams(wall_time, &scalars::hparams(info))?;
        }
        match self.scalars.of(record, devices) {
            Some((step, values)) => self.file.scalars(step, wall_time, &values),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_is_tfrecords() {
        // CRC-32C of "123456789" is 0xe3069283 (RFC 3720's check value); masked by hand.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8));
    }

    #[test]
    fn records_are_framed_by_their_length_and_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = EventFile::create(dir.path(), 1.5e9, "h").unwrap();
        f.scalars(7, 1.5e9 + 1.0, &[("train/loss".into(), 0.25)]).unwrap();
        let bytes = std::fs::read(f.path()).unwrap();
        let mut at = 0;
        let mut events = Vec::new();
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            assert_eq!(
                u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()),
                masked_crc(&bytes[at..at + 8])
            );
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(data));
            events.push(Event::decode(data).unwrap());
            at += 16 + len;
        }
        assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
        let v = &events[1].summary.as_ref().unwrap().value[0];
        assert_eq!((events[1].step, v.tag.as_str(), v.simple_value), (7, "train/loss", Some(0.25)));
    }
}
