//! What data a run trains on: the data part of the settings tree (`crate::settings`), its
//! formats and loaders by name. Reading the data is the engine's (`data`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a run trains on and how it reads it.
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
    /// `--token-dtype`: how token data stores a token.
    pub token_dtype: TokenDtype,
    /// `--block-size T`: the tokens a window of token data feeds the model (its targets are
    /// the same tokens one later).
    pub block_size: Option<usize>,
    /// `--tokenizer FILE`: the Hugging Face `tokenizer.json` that turns a folder of `.txt` files
    /// into tokens (absent: the folder's own `tokenizer.json`, else the text's bytes); absolute
    /// once resolved.
    pub tokenizer: Option<PathBuf>,
}

impl Default for DataSettings {
    fn default() -> Self {
        DataSettings {
            path: PathBuf::from(DEFAULT_DATA_DIR),
            format: None,
            image_size: None,
            train_limit: None,
            test_limit: None,
            val_fraction: None,
            max_bad: MAX_BAD_IMAGES,
            token_dtype: TokenDtype::U16,
            block_size: None,
            tokenizer: None,
        }
    }
}

/// Where the data is looked for when neither `--data` nor `$DPT_DATA` says.
pub const DEFAULT_DATA_DIR: &str = "/usr/share/datasets/fashion-mnist";

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
    /// Token files in nanoGPT's layout: `train.bin` and `val.bin`, little-endian token ids.
    Tokens,
    /// A folder of `.txt` files, tokenized as bytes once into a cached `train.bin`/`val.bin`.
    Text,
}

/// How token data stores one token: nanoGPT's uint16 (vocabularies up to 65,536), or uint32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenDtype {
    #[default]
    U16,
    U32,
}

impl TokenDtype {
    /// Bytes per token.
    pub fn bytes(self) -> usize {
        match self {
            TokenDtype::U16 => 2,
            TokenDtype::U32 => 4,
        }
    }
}

crate::names!(TokenDtype, "token dtype", { U16 => "u16" | "uint16", U32 => "u32" | "uint32" });

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

/// The default share of undecodable images skipped (`--max-bad-images`): one in a thousand.
pub const MAX_BAD_IMAGES: f64 = 0.001;

/// The default memory budget of the data (`--data-memory`): 2 GiB.
pub const DATA_MEMORY: u64 = 2 << 30;

crate::names!(DataFormat, "data format", {
    Idx => "idx",
    Cifar10 => "cifar10",
    Images => "images",
    Npy => "npz" | "npy",
    Safetensors => "safetensors",
    WebDataset => "webdataset",
    Tokens => "tokens",
    Text => "text",
});

crate::names!(Loader, "loader", { Auto => "auto", Resident => "resident", Stream => "stream" });
