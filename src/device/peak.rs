//! The figures of a run's GPUs that its model FLOP utilisation and its memory report need: the
//! peak FLOP/s of the GPUs in the run's precision (by the name NVML gives the first of them,
//! from `flops::GPU_PEAKS`), and the most memory the caching allocator held on each.

use crate::flops::PeakFlops;
use crate::model::Precision;
use dpt_core::device::DeviceId;

/// The distinct CUDA devices among `devices`, in order.
fn distinct_gpus(devices: &[DeviceId]) -> Vec<usize> {
    let mut gpus: Vec<usize> =
        devices.iter().filter_map(|d| if let DeviceId::Cuda(i) = d { Some(*i) } else { None }).collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus
}

/// The name NVML gives CUDA device `index` (`NVIDIA H100 80GB HBM3`), if NVML is there.
pub fn gpu_name(index: usize) -> Option<String> {
    gpu_facts(index).map(|(name, _)| name)
}

/// The name NVML gives CUDA device `index` and its memory in bytes (a MIG slice's own), if
/// NVML is there.
pub fn gpu_facts(index: usize) -> Option<(String, u64)> {
    let gpus = crate::monitor::nvml::Gpus::open().ok()?;
    let identity = dpt_sys::c10d::cuda_identity(index).ok();
    let (device, _) = gpus.find(identity.as_ref(), index).ok()?;
    Some((device.name().ok()?, device.memory_info().ok()?.total))
}

/// What the run's GPUs can do at most in `precision`, each GPU counted once however many
/// replicas share it, times `ranks` processes of the same devices. `None` on the CPU, for a GPU
/// the table does not know, or without NVML to name it.
pub fn peak_flops(devices: &[DeviceId], precision: Precision, tf32: bool, ranks: usize) -> Option<PeakFlops> {
    let gpus = distinct_gpus(devices);
    let first = *gpus.first()?;
    PeakFlops::of(&gpu_name(first)?, gpus.len() * ranks.max(1), precision, tf32)
}

/// The most memory the caching allocator held allocated at once on each of the run's GPUs,
/// in MiB (empty on the CPU).
pub fn device_peak_mib(devices: &[DeviceId]) -> Vec<f64> {
    distinct_gpus(devices)
        .into_iter()
        .filter_map(|i| dpt_sys::c10d::cuda_peak_allocated(i).ok())
        .map(|bytes| bytes as f64 / f64::from(1 << 20))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_shared_by_replicas_counts_once_and_the_cpu_has_no_peak() {
        let devices = [DeviceId::Cuda(1), DeviceId::Cuda(0), DeviceId::Cuda(1), DeviceId::Cpu];
        assert_eq!(distinct_gpus(&devices), vec![0, 1]);
        assert_eq!(peak_flops(&[DeviceId::Cpu, DeviceId::Cpu], Precision::F32, true, 2), None);
        assert!(device_peak_mib(&[DeviceId::Cpu]).is_empty());
    }
}
