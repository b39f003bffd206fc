//! Data loading: the IDX reader and the in-memory data set built from it.

pub mod dataset;
pub mod idx;

pub use dataset::{DataError, Dataset, Split, DEFAULT_DATA_DIR, NUM_CLASSES};
pub use idx::{IdxArray, IdxError};
