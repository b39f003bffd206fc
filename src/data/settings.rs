//! What data a run trains on: the data part of the settings tree (`crate::settings`). How it
//! is loaded (resident or streamed, within how much memory) is the attempt's placement.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::DataFormat;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataSettings {
    /// `--data`, absolute once resolved.
    pub path: PathBuf,
    /// `--data-format` (absent: detected).
    pub format: Option<DataFormat>,
    /// `--image-size H,W`.
    pub image_size: Option<(u32, u32)>,
    pub train_limit: Option<usize>,
    pub test_limit: Option<usize>,
    pub val_fraction: Option<f64>,
    /// `--max-bad-images`: the share of undecodable images skipped rather than refused.
    pub max_bad: f64,
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
            max_bad: super::format::MAX_BAD_IMAGES,
        }
    }
}

impl DataSettings {
    /// The loader's options, with the attempt's loader and the memory the data may take.
    pub fn load_options(&self, loader: super::Loader, memory: u64) -> super::LoadOptions {
        super::LoadOptions {
            format: self.format,
            image_size: self.image_size,
            max_bad: self.max_bad,
            loader,
            memory,
        }
    }
}
