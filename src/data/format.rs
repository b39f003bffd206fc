//! Which format a `--data` path holds, detected from what the folder or file contains, or named
//! with `--data-format`.

use std::path::Path;

use super::dataset::{DataError, Dataset, Split};

pub use dpt_core::data::{DataFormat, DataSettings, Loader, DATA_MEMORY, MAX_BAD_IMAGES};

/// How to load a data set: its format (detected when `None`) and, for image folders and
/// shards, the size every image is resized to and the share of undecodable images left out
/// rather than refused.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    pub format: Option<DataFormat>,
    pub image_size: Option<(u32, u32)>,
    pub max_bad: f64,
    /// Whether the data is decoded into memory or streamed (image folders, shards, uint8
    /// `.npy` arrays, CIFAR-10 batches, uncompressed IDX files).
    pub loader: Loader,
    /// The host memory the data may take, in bytes (`--data-memory`).
    pub memory: u64,
    /// How token data is cut into windows (`None`: the settings ask for none yet).
    pub tokens: Option<super::tokens::TokenLayout>,
    /// `--tokenizer`: the tokenizer.json that turns text into tokens.
    pub tokenizer: Option<std::path::PathBuf>,
}

impl LoadOptions {
    /// The options of `data`, with the attempt's loader and the memory the data may take.
    pub fn of(data: &DataSettings, loader: Loader, memory: u64) -> LoadOptions {
        LoadOptions {
            format: data.format,
            image_size: data.image_size,
            max_bad: data.max_bad,
            loader,
            memory,
            tokens: None,
            tokenizer: data.tokenizer.clone(),
        }
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            format: None,
            image_size: None,
            max_bad: MAX_BAD_IMAGES,
            loader: Loader::Auto,
            memory: DATA_MEMORY,
            tokens: None,
            tokenizer: None,
        }
    }
}

fn has(dir: &Path, names: &[&str]) -> bool {
    names.iter().any(|n| dir.join(n).is_file())
}

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
    } else if super::tokens::detect(path) {
        Ok(DataFormat::Tokens)
    } else if super::text::detect(path) {
        Ok(DataFormat::Text)
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
pub fn load(format: DataFormat, path: &Path, options: LoadOptions) -> Result<Dataset, DataError> {
    match format {
        DataFormat::Idx => super::idx_set::load(path, options),
        DataFormat::Cifar10 => super::cifar::load(path, options),
        DataFormat::Images => super::folder::load(path, options),
        DataFormat::WebDataset => super::webdataset::load(path, options),
        DataFormat::Npy | DataFormat::Safetensors => super::arrays::load(path, format, options),
        DataFormat::Tokens => super::tokens::load(path, options.tokens),
        DataFormat::Text => {
            let layout = options.tokens.ok_or(DataError::NoBlockSize { dir: path.to_owned() })?;
            let codec = super::codec::TextCodec::open(path, options.tokenizer.as_deref())?;
            let cache = super::text::tokenized(path, &codec)?;
            // The cache holds the tokens as wide as the vocabulary needs, whatever --token-dtype says.
            let layout = super::tokens::TokenLayout { dtype: codec.dtype(), ..layout };
            let mut data = super::tokens::load(&cache, Some(layout))?;
            data.source = format!(
                "the .txt files in {} as {} (90/10 split, cached in {}), windows of {}",
                path.display(),
                codec.describe(),
                cache.display(),
                layout.block
            );
            data.text = Some(std::sync::Arc::new(codec));
            Ok(data)
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
