//! Data loading: the formats a `--data` path may hold (IDX, CIFAR-10 binary, image folders,
//! WebDataset tar shards, NumPy and safetensors arrays, token files and text folders) and the
//! data set they all become, in memory or indexed to be streamed from storage (`stream`).

mod arrays;
mod cifar;
pub mod codec;
pub mod dataset;
mod folder;
pub mod format;
pub mod idx;
mod idx_set;
mod index_cache;
pub mod pieces;
pub mod seam;
mod split;
pub mod stream;
pub mod targets;
pub mod text;
pub mod token_scan;
pub mod tokens;
pub mod unigram_scores;
mod webdataset;

pub use dataset::{DataError, Dataset, Pixels, Split, DEFAULT_DATA_DIR, NUM_CLASSES};
pub use format::DataSettings;
pub use format::{DataFormat, LoadOptions, Loader};
pub use idx::{IdxArray, IdxError};
pub use index_cache::{cache_base, fnv};
