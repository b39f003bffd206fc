//! GPUs through NVML, loaded at run time; absent NVML is an ordinary outcome, not an error.

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::Nvml;

use super::{DeviceSample, SampleSource};
use crate::engine::DeviceId;

pub struct Gpus {
    nvml: Nvml,
}

impl Gpus {
    /// Loads NVML (nvml-wrapper opens `libnvidia-ml.so.1`, the name every driver ships).
    pub fn open() -> Result<Gpus, String> {
        Nvml::init().map(|nvml| Gpus { nvml }).map_err(|e| format!("NVML not available ({e})"))
    }

    /// How many GPUs the driver shows, and its version: what the machine has, whatever
    /// libtorch makes of it.
    pub fn census(&self) -> (usize, Option<String>) {
        let count = self.nvml.device_count().map_or(0, |n| n as usize);
        (count, self.nvml.sys_driver_version().ok())
    }

    /// A reading of GPU `index` (NVML's numbering, which matches CUDA's when
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`), or why NVML cannot give one.
    pub fn sample(&self, index: usize) -> Result<DeviceSample, String> {
        let i = u32::try_from(index).map_err(|_| format!("no GPU {index}"))?;
        let dev = self.nvml.device_by_index(i).map_err(|e| format!("NVML cannot open GPU {index}: {e}"))?;
        let mem = dev.memory_info().ok();
        Ok(DeviceSample {
            device: DeviceId::Cuda(index),
            source: SampleSource::Nvml,
            util_pct: dev.utilization_rates().ok().map(|u| f64::from(u.gpu)),
            mem_used: mem.as_ref().map(|m| m.used),
            mem_total: mem.as_ref().map(|m| m.total),
            temp_c: dev.temperature(TemperatureSensor::Gpu).ok(),
            power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            name: dev.name().ok(),
            rank: None,
            host: None,
            note: None,
        })
    }
}
