//! Which format a `--data` path holds, detected from what the folder or file contains, or named
//! with `--data-format`.

use std::path::Path;

use super::dataset::{DataError, Dataset, Split};

/// The data set formats dpt-tui reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// MNIST-style IDX files (`train-images-idx3-ubyte[.gz]` …).
    Idx,
    /// CIFAR-10's binary batches (`data_batch_1.bin` … `test_batch.bin`).
    Cifar10,
    /// `train/<class>/*.png|jpg` and `test/<class>/*`.
    Images,
    /// `x_train`, `y_train`, `x_test`, `y_test` in a `.npz` file or as `.npy` files in a folder.
    Npy,
    /// The same four arrays in a `.safetensors` file.
    Safetensors,
    /// WebDataset tar shards: `train/*.tar` with `val/` or `test/` shards.
    WebDataset,
}

impl std::str::FromStr for DataFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "idx" => Ok(DataFormat::Idx),
            "cifar10" => Ok(DataFormat::Cifar10),
            "images" => Ok(DataFormat::Images),
            "npy" | "npz" => Ok(DataFormat::Npy),
            "safetensors" => Ok(DataFormat::Safetensors),
            "webdataset" => Ok(DataFormat::WebDataset),
            _ => Err(format!(
                "unknown data format '{s}'; use idx, cifar10, images, npz, safetensors or webdataset"
            )),
        }
    }
}

impl std::fmt::Display for DataFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DataFormat::Idx => "idx",
            DataFormat::Cifar10 => "cifar10",
            DataFormat::Images => "images",
            DataFormat::Npy => "npz",
            DataFormat::Safetensors => "safetensors",
            DataFormat::WebDataset => "webdataset",
        })
    }
}

/// How to load a data set: its format (detected when `None`) and, for image folders and
/// shards, the size every image is resized to and the share of undecodable images left out
/// rather than refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadOptions {
    pub format: Option<DataFormat>,
    pub image_size: Option<(u32, u32)>,
    pub max_bad: f64,
    /// Whether the data is decoded into memory or streamed (image folders, shards, uint8
    /// `.npy` arrays, CIFAR-10 batches, uncompressed IDX files).
    pub loader: Loader,
    /// The host memory the data may take, in bytes (`--data-memory`).
    pub memory: u64,
}

/// How the training data reaches the replicas (`--loader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loader {
    /// Resident when the decoded images fit the memory budget, else streamed.
    #[default]
    Auto,
    /// Decoded once, held in memory and on every replica's device.
    Resident,
    /// Read and decoded batch by batch as training reaches them, within the memory budget.
    Stream,
}

impl Loader {
    /// Whether a data set of `decoded` bytes is streamed under a budget of `memory` bytes.
    pub fn streams(self, decoded: u64, memory: u64) -> bool {
        match self {
            Loader::Auto => decoded > memory,
            Loader::Resident => false,
            Loader::Stream => true,
        }
    }
}

impl std::str::FromStr for Loader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Loader::Auto),
            "resident" => Ok(Loader::Resident),
            "stream" => Ok(Loader::Stream),
            _ => Err(format!("unknown loader '{s}'; use auto, resident or stream")),
        }
    }
}

/// The default share of undecodable images skipped (`--max-bad-images`): one in a thousand.
pub const MAX_BAD_IMAGES: f64 = 0.001;

/// The default memory budget of the data (`--data-memory`): 2 GiB.
pub const DATA_MEMORY: u64 = 2 << 30;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            format: None,
            image_size: None,
            max_bad: MAX_BAD_IMAGES,
            loader: Loader::Auto,
            memory: DATA_MEMORY,
        }
    }
}

fn has(dir: &Path, names: &[&str]) -> bool {
    names.iter().any(|n| dir.join(n).is_file())
}

impl DataFormat {
    /// The format of `path`, from what it holds.
    pub fn detect(path: &Path) -> Result<DataFormat, DataError> {
        let unknown = || DataError::Unknown { path: path.to_owned() };
        if path.is_file() {
            return match path.extension().and_then(|e| e.to_str()) {
                Some("npz") => Ok(DataFormat::Npy),
                Some("safetensors") => Ok(DataFormat::Safetensors),
                _ => Err(unknown()),
            };
        }
        if has(path, &["train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"]) {
            Ok(DataFormat::Idx)
        } else if has(path, &["data_batch_1.bin", "cifar-10-batches-bin/data_batch_1.bin"]) {
            Ok(DataFormat::Cifar10)
        } else if has(path, &["x_train.npy"]) {
            Ok(DataFormat::Npy)
        } else if super::webdataset::detect(path) {
            Ok(DataFormat::WebDataset)
        } else if path.join("train").is_dir() {
            Ok(DataFormat::Images)
        } else if path.is_dir() {
            Err(unknown())
        } else {
            // Neither file nor folder: the IDX loader's message says how to get the default data.
            Ok(DataFormat::Idx)
        }
    }

    /// Loads `path` in this format.
    pub fn load(self, path: &Path, options: LoadOptions) -> Result<Dataset, DataError> {
        match self {
            DataFormat::Idx => super::idx_set::load(path, options),
            DataFormat::Cifar10 => super::cifar::load(path, options),
            DataFormat::Images => super::folder::load(path, options),
            DataFormat::WebDataset => super::webdataset::load(path, options),
            DataFormat::Npy | DataFormat::Safetensors => super::arrays::load(path, self, options),
        }
    }
}

/// A data set from two splits whose labels are checked: none negative, the classes counted
/// from the largest label.
pub fn finish(train: Split, test: Split, source: String, path: &Path) -> Result<Dataset, DataError> {
    for split in [&train, &test] {
        if let Some((index, &label)) = split.labels.iter().enumerate().find(|(_, &l)| l < 0) {
            return Err(DataError::LabelOutOfRange { path: path.to_owned(), index, label, max: i64::MAX });
        }
    }
    let largest = train.labels.iter().chain(&test.labels).copied().max().unwrap_or(0);
    Ok(Dataset::of(train, test, source, largest as usize + 1))
}
