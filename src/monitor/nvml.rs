//! GPUs through NVML, loaded at run time; absent NVML is an ordinary outcome, not an error.

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::Nvml;

use super::{DeviceSample, SampleSource};
use crate::engine::DeviceId;

pub struct Gpus {
    nvml: Nvml,
}

impl Gpus {
    /// Loads `libnvidia-ml.so`, then `libnvidia-ml.so.1` (drivers often ship only the latter).
    pub fn open() -> Result<Gpus, String> {
        match Nvml::init() {
            Ok(nvml) => Ok(Gpus { nvml }),
            Err(first) => Nvml::builder()
                .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
                .init()
                .map(|nvml| Gpus { nvml })
                .map_err(|_| format!("NVML not available ({first})")),
        }
    }

    /// A reading of GPU `index` (NVML's numbering, which matches CUDA's when
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`), or `None` if NVML cannot open it.
    pub fn sample(&self, index: usize) -> Option<DeviceSample> {
        let dev = self.nvml.device_by_index(u32::try_from(index).ok()?).ok()?;
        let mem = dev.memory_info().ok();
        Some(DeviceSample {
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
        })
    }
}
