//! What the device monitor reports: per-device readings (NVML for GPUs, the process for CPU
//! devices) and why NVML is not used. The sampling thread is the main crate's (`monitor`).

pub mod gpu;

use serde::{Deserialize, Serialize};

use crate::device::DeviceId;

/// Where a sample's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleSource {
    /// The GPU itself, through NVML.
    Nvml,
    /// This process as the OS sees it (CPU use in % of one core, resident memory): for CPU
    /// devices only.
    Process,
    /// A GPU whose figures NVML cannot give; `note` says why. Never CPU figures in their place.
    Unavailable,
}

/// One reading of one device. Every figure is optional: a missing one is shown as absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSample {
    pub device: DeviceId,
    pub source: SampleSource,
    /// GPU utilization, or the process's CPU use (100 = one core busy).
    pub util_pct: Option<f64>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub temp_c: Option<u32>,
    pub power_w: Option<f64>,
    pub name: Option<String>,
    /// The rank whose device this is, in a multi-process run (absent: this process's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// That rank's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Why figures are missing, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A GPU's further figures (clocks, throttling, links, ECC, fan, processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Box<gpu::GpuDetail>>,
}

impl DeviceSample {
    /// A GPU reading without figures, saying why.
    pub fn unavailable(device: DeviceId, why: String) -> DeviceSample {
        DeviceSample {
            device,
            source: SampleSource::Unavailable,
            util_pct: None,
            mem_used: None,
            mem_total: None,
            temp_c: None,
            power_w: None,
            name: None,
            rank: None,
            host: None,
            note: Some(why),
            gpu: None,
        }
    }
}

/// What the monitor thread sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MonitorMsg {
    /// Why NVML is not used (sent once, at start, when it is not).
    NvmlUnavailable { reason: String },
    /// A reading of every monitored device.
    Samples(Vec<DeviceSample>),
    /// Lines a script run's script wrote (`dpt-tui run -- CMD`), for the dashboard's log; not
    /// recorded (the run directory's `output.log` keeps them).
    Output { lines: Vec<String> },
}
