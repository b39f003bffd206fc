//! Device monitoring on a thread of its own: GPU utilization, memory, temperature and power from
//! NVML (loaded at run time, optional), or this process's CPU and memory use where NVML has
//! nothing to say (no driver, CPU devices).

pub mod gpu;
pub mod nvml;
mod process;

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};

use crate::engine::DeviceId;

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
}

/// Starts the `dpt-monitor` thread sampling `devices` (duplicates removed) every `period`. It
/// stops when `stop` is dropped or the receiver goes away.
pub fn spawn(
    devices: &[DeviceId],
    period: Duration,
    out: Sender<MonitorMsg>,
    stop: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let mut unique: Vec<DeviceId> = Vec::new();
    for d in devices {
        if !unique.contains(d) {
            unique.push(*d);
        }
    }
    std::thread::Builder::new().name("dpt-monitor".into()).spawn(move || {
        let gpu = nvml::Gpus::open();
        if let Err(reason) = &gpu {
            if out.send(MonitorMsg::NvmlUnavailable { reason: reason.clone() }).is_err() {
                return;
            }
        }
        // What identifies each CUDA device to NVML, read once.
        let identities: Vec<Option<crate::dist::c10d::CudaIdentity>> = unique
            .iter()
            .map(|d| match d {
                DeviceId::Cuda(i) if gpu.is_ok() => crate::dist::c10d::cuda_identity(*i).ok(),
                _ => None,
            })
            .collect();
        let mut process = process::ProcessProbe::new();
        loop {
            let cpu = process.sample();
            let samples = unique
                .iter()
                .zip(&identities)
                .map(|(&device, identity)| match (&gpu, device) {
                    (Ok(g), DeviceId::Cuda(i)) => g
                        .sample(identity.as_ref(), i)
                        .unwrap_or_else(|why| DeviceSample::unavailable(device, why)),
                    (Err(why), DeviceId::Cuda(_)) => DeviceSample::unavailable(device, why.clone()),
                    (_, DeviceId::Cpu) => cpu.for_device(device),
                })
                .collect();
            if out.send(MonitorMsg::Samples(samples)).is_err() {
                return;
            }
            // The wait doubles as the stop signal, so stopping never waits out a period.
            match stop.recv_timeout(period) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_nvml_cannot_read_gets_an_unavailable_sample_not_cpu_figures() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        // No machine has GPU 999: with NVML or without, its figures are unavailable.
        let handle =
            spawn(&[DeviceId::Cuda(999), DeviceId::Cpu], Duration::from_millis(100), tx, stop).unwrap();
        let samples = rx
            .iter()
            .find_map(|m| if let MonitorMsg::Samples(s) = m { Some(s) } else { None })
            .expect("a reading");
        drop(stop_tx);
        handle.join().unwrap();
        let gpu = samples.iter().find(|s| s.device == DeviceId::Cuda(999)).unwrap();
        assert_eq!(gpu.source, SampleSource::Unavailable);
        assert!(gpu.util_pct.is_none() && gpu.mem_used.is_none() && gpu.note.is_some());
        let cpu = samples.iter().find(|s| s.device == DeviceId::Cpu).unwrap();
        assert_eq!(cpu.source, SampleSource::Process);
    }
}
