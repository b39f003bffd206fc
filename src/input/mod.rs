//! The input pipeline: from a loaded data set to each replica's batches. The global batch split
//! over the replicas in a seeded order (`shard`), the splits resident on each device
//! (`resident`) or streamed by loader threads (`loader`), augmented on the device or in the
//! loader (`augment`, `resized_crop`), and handed to the worker step by step (`batches`).

pub mod augment;
pub(crate) mod batches;
pub mod loader;
pub mod resident;
pub mod resized_crop;
pub mod shard;
