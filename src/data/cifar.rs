//! CIFAR-10's binary batches: each record is one label byte (0–9) and 3,072 pixel bytes, the
//! red, green and blue 32×32 planes in turn (the layout the CIFAR-10 page documents for
//! `cifar-10-binary.tar.gz`). Five training batches and one test batch.

use std::path::Path;

use super::dataset::{DataError, Dataset, Pixels, Split};

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
    Ok(Split { images: Pixels::Bytes(images), labels, channels: 3, rows: SIDE, cols: SIDE })
}

/// Loads the batches from `dir` (or its `cifar-10-batches-bin` folder, as the archive unpacks).
pub fn load(dir: &Path) -> Result<Dataset, DataError> {
    let inner = dir.join("cifar-10-batches-bin");
    let dir = if inner.join("data_batch_1.bin").is_file() { inner } else { dir.to_owned() };
    let train: Vec<String> = (1..=5).map(|i| format!("data_batch_{i}.bin")).collect();
    Ok(Dataset {
        train: read_batches(&dir, &train)?,
        test: read_batches(&dir, &["test_batch.bin".to_owned()])?,
        val: None,
        test_is_val: false,
        skipped: Vec::new(),
        source: format!("CIFAR-10 binary batches in {}", dir.display()),
        classes: CLASSES as usize,
    })
}
