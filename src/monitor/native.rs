//! The monitor of a run this process trains: its devices, each read by what identifies it to
//! libtorch.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, MonitorMsg};

use super::{nvml, process};

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
        let identities: Vec<Option<dpt_sys::c10d::CudaIdentity>> = unique
            .iter()
            .map(|d| match d {
                DeviceId::Cuda(i) if gpu.is_ok() => dpt_sys::c10d::cuda_identity(*i).ok(),
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
    use dpt_core::monitor::SampleSource;

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
