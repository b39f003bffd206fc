//! What data a run trains on, as the flags give it and checkpoints keep it: a resumed run (and
//! the same command run again) takes these from its checkpoint unless a flag says otherwise.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::DataFormat;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSettings {
    /// `--data`, as given.
    pub path: PathBuf,
    /// `--data-format` (absent: detected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DataFormat>,
    /// `--image-size H,W`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<(u32, u32)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_fraction: Option<f64>,
    /// `--max-bad-images`: the share of undecodable images skipped rather than refused.
    #[serde(default = "max_bad_images")]
    pub max_bad: f64,
    /// `--loader`: resident, streamed, or by size.
    #[serde(default)]
    pub loader: super::Loader,
    /// `--data-memory`: the host memory the data may take, in bytes.
    #[serde(default = "data_memory")]
    pub memory: u64,
}

fn data_memory() -> u64 {
    super::format::DATA_MEMORY
}

fn max_bad_images() -> f64 {
    super::format::MAX_BAD_IMAGES
}

impl Default for DataSettings {
    fn default() -> Self {
        DataSettings {
            path: PathBuf::from(super::DEFAULT_DATA_DIR),
            format: None,
            image_size: None,
            train_limit: None,
            test_limit: None,
            val_fraction: None,
            max_bad: max_bad_images(),
            loader: super::Loader::Auto,
            memory: data_memory(),
        }
    }
}

impl DataSettings {
    /// The loader's options.
    pub fn load_options(&self) -> super::LoadOptions {
        super::LoadOptions {
            format: self.format,
            image_size: self.image_size,
            max_bad: self.max_bad,
            loader: self.loader,
            memory: self.memory,
        }
    }
}
