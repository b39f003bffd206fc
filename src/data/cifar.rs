//! CIFAR-10's binary batches: each record is one label byte (0–9) and 3,072 pixel bytes, the
//! red, green and blue 32×32 planes in turn (the layout the CIFAR-10 page documents for
//! `cifar-10-binary.tar.gz`). Five training batches and one test batch, read into memory or,
//! streamed, left in their files (each image read from its record when training reaches it).

use std::io::{BufReader, Read};
use std::path::Path;

use super::dataset::{DataError, Dataset, Pixels, Split};
use super::format::LoadOptions;
use super::stream::{RowSplit, Rows};

const SIDE: usize = 32;
const PIXELS: usize = 3 * SIDE * SIDE;
const RECORD: usize = 1 + PIXELS;
const CLASSES: i64 = 10;

fn read_batches(dir: &Path, files: &[String]) -> Result<Split, DataError> {
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for file in files {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(DataError::CifarMissing { dir: dir.to_owned(), file: file.clone() });
        }
        let bytes =
            std::fs::read(&path).map_err(|e| DataError::Read { path: path.clone(), why: e.to_string() })?;
        if bytes.is_empty() || bytes.len() % RECORD != 0 {
            return Err(DataError::CifarSize { path, len: bytes.len() });
        }
        images.reserve(bytes.len() / RECORD * PIXELS);
        for (index, record) in bytes.chunks_exact(RECORD).enumerate() {
            let label = i64::from(record[0]);
            if label >= CLASSES {
                return Err(DataError::LabelOutOfRange { path, index, label, max: CLASSES });
            }
            labels.push(label);
            images.extend_from_slice(&record[1..]);
        }
    }
    Ok(Split { images: Pixels::Bytes(images), labels, channels: 3, rows: SIDE, cols: SIDE, targets: None })
}

/// The batches' records left in their files: each image's row found by its place, the labels
/// read in one pass over the files (a record at a time, never a whole batch).
fn stream_batches(dir: &Path, files: &[String], rows: &mut Rows) -> Result<RowSplit, DataError> {
    let (mut entries, mut labels) = (Vec::new(), Vec::new());
    for file in files {
        let path = dir.join(file);
        let io = |e: std::io::Error| DataError::Read { path: path.clone(), why: e.to_string() };
        let len = std::fs::metadata(&path).map_err(io)?.len() as usize;
        let n = len / RECORD;
        let mut reader = BufReader::with_capacity(RECORD * 64, std::fs::File::open(&path).map_err(io)?);
        let mut record = vec![0u8; RECORD];
        for index in 0..n {
            reader.read_exact(&mut record).map_err(io)?;
            let label = i64::from(record[0]);
            if label >= CLASSES {
                return Err(DataError::LabelOutOfRange { path, index, label, max: CLASSES });
            }
            labels.push(label);
        }
        entries.extend(rows.entries(&path, (1, RECORD as u64), PIXELS as u32, n));
    }
    Ok(RowSplit { entries, labels, shape: (3, SIDE, SIDE), channels_last: false })
}

/// The byte size of each batch, checked: present, whole records.
fn sizes(dir: &Path, files: &[String]) -> Result<u64, DataError> {
    let mut records = 0;
    for file in files {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(DataError::CifarMissing { dir: dir.to_owned(), file: file.clone() });
        }
        let len = std::fs::metadata(&path)
            .map_err(|e| DataError::Read { path: path.clone(), why: e.to_string() })?
            .len() as usize;
        if len == 0 || len % RECORD != 0 {
            return Err(DataError::CifarSize { path, len });
        }
        records += (len / RECORD) as u64;
    }
    Ok(records * PIXELS as u64)
}

/// Loads the batches from `dir` (or its `cifar-10-batches-bin` folder, as the archive unpacks):
/// read into memory, or left in their files when `options` stream them.
pub fn load(dir: &Path, options: LoadOptions) -> Result<Dataset, DataError> {
    let inner = dir.join("cifar-10-batches-bin");
    let dir = if inner.join("data_batch_1.bin").is_file() { inner } else { dir.to_owned() };
    let train: Vec<String> = (1..=5).map(|i| format!("data_batch_{i}.bin")).collect();
    let test = ["test_batch.bin".to_owned()];
    let decoded = sizes(&dir, &train)? + sizes(&dir, &test)?;
    let streamed = options.loader.streams(decoded, options.memory);
    let (train, test) = if streamed {
        let mut rows = Rows::default();
        let train = stream_batches(&dir, &train, &mut rows)?;
        let test = stream_batches(&dir, &test, &mut rows)?;
        let [train, test] = rows.splits([train, test]);
        (train, test)
    } else {
        (read_batches(&dir, &train)?, read_batches(&dir, &test)?)
    };
    let source =
        format!("CIFAR-10 binary batches in {}{}", dir.display(), if streamed { " (streamed)" } else { "" });
    Ok(Dataset::of(train, test, source, CLASSES as usize))
}
