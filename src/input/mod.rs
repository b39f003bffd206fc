//! The input pipeline: from a loaded data set to each replica's batches. The global batch split
//! over the replicas in a seeded order (`shard`), the splits resident on each device
//! (`resident`) or streamed by loader threads (`loader`), augmented on the device or in the
//! loader (`augment`, `resized_crop`), and handed to the worker step by step (`batches`).

pub mod augment;
mod bad_images;
pub(crate) mod batches;
pub mod loader;
pub mod resident;
pub mod resized_crop;
pub mod shard;

use tch::{Device, Tensor};

/// `host` in page-locked memory when it is bound for a CUDA device, so that its copy there does
/// not block the replica (DataLoader's `pin_memory`, nanoGPT's `get_batch`); as it is for the
/// CPU, and if pinning fails (the copy then blocks; nothing else changes). Through `_pin_memory`,
/// which `Tensor.pin_memory` calls: torch 2.11 warns on every call that passes the device.
pub fn pinned(host: Tensor, device: Device) -> Tensor {
    if !device.is_cuda() {
        return host;
    }
    match host.f_internal_pin_memory(device) {
        Ok(pinned) => pinned,
        Err(_) => host,
    }
}
