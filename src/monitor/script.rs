//! The devices of a script run (`dpt-tui run -- CMD`), as its ranks name them: a GPU by the UUID
//! the script reports (so the figures are its own GPU's, whatever `CUDA_VISIBLE_DEVICES` made of
//! the numbering), any other device by its rank's process (CPU use and memory).

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, MonitorMsg};
use dpt_core::record::script::ScriptDevice;

use super::{nvml, process};

/// A rank's device and the process of that rank.
pub type Watched = (ScriptDevice, u32);

/// Starts the `dpt-monitor` thread: it samples the devices last sent on `devices` every
/// `period`, until `stop` is dropped or `out` goes away. With more than one rank, each sample
/// carries its rank.
pub fn spawn(
    devices: Receiver<Vec<Watched>>,
    period: Duration,
    out: Sender<MonitorMsg>,
    stop: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("dpt-monitor".into()).spawn(move || {
        let mut gpu: Option<Result<nvml::Gpus, String>> = None;
        let mut watched: Vec<Watched> = Vec::new();
        let mut probes: HashMap<u32, process::ProcessProbe> = HashMap::new();
        let mut devices = devices;
        loop {
            while let Ok(list) = devices.try_recv() {
                watched = list;
            }
            if devices.is_empty() && watched.is_empty() {
                // Nothing to watch yet: wait for the first rank's hello.
                crossbeam_channel::select! {
                    recv(devices) -> list => match list {
                        Ok(list) => watched = list,
                        Err(_) => devices = crossbeam_channel::never(),
                    },
                    recv(stop) -> _ => return,
                }
            }
            if gpu.is_none() && watched.iter().any(|(d, _)| d.kind == "cuda") {
                let opened = nvml::Gpus::open();
                if let Err(reason) = &opened {
                    if out.send(MonitorMsg::NvmlUnavailable { reason: reason.clone() }).is_err() {
                        return;
                    }
                }
                gpu = Some(opened);
            }
            let ranked = watched.iter().any(|(d, _)| d.rank > 0);
            let samples = watched.iter().map(|w| sample(w, ranked, gpu.as_ref(), &mut probes)).collect();
            if out.send(MonitorMsg::Samples(samples)).is_err() {
                return;
            }
            match stop.recv_timeout(period) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    })
}

fn sample(
    (d, pid): &Watched,
    ranked: bool,
    gpu: Option<&Result<nvml::Gpus, String>>,
    probes: &mut HashMap<u32, process::ProcessProbe>,
) -> DeviceSample {
    let mut sample = match (d.kind.as_str(), d.index, &d.uuid, gpu) {
        ("cuda", Some(i), Some(uuid), Some(Ok(g))) => {
            g.sample_uuid(uuid, i).unwrap_or_else(|why| DeviceSample::unavailable(DeviceId::Cuda(i), why))
        }
        ("cuda", Some(i), Some(_), Some(Err(why))) => {
            DeviceSample::unavailable(DeviceId::Cuda(i), why.clone())
        }
        ("cuda", i, _, _) => DeviceSample::unavailable(
            DeviceId::Cuda(i.unwrap_or(0)),
            "the script did not report its GPU's UUID".into(),
        ),
        _ => {
            let probe = probes.entry(*pid).or_insert_with(|| process::ProcessProbe::of_pid(*pid));
            let mut s = probe.sample().for_device(DeviceId::Cpu);
            if d.kind != "cpu" {
                s.name = Some(format!("{} (figures: its process)", d.label()));
            }
            s
        }
    };
    if ranked {
        sample.rank = Some(d.rank);
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpt_core::monitor::SampleSource;

    fn device(kind: &str, index: Option<usize>, uuid: Option<&str>, rank: usize) -> ScriptDevice {
        ScriptDevice { kind: kind.into(), index, name: None, uuid: uuid.map(str::to_owned), rank }
    }

    #[test]
    fn a_gpu_is_looked_up_by_its_uuid_and_any_other_device_by_its_ranks_process() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (devices_tx, devices) = crossbeam_channel::unbounded();
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let handle = spawn(devices, Duration::from_millis(50), tx, stop).unwrap();
        let me = std::process::id();
        devices_tx
            .send(vec![
                // No machine has this GPU: with NVML or without, its figures are unavailable.
                (device("cuda", Some(0), Some("GPU-00000000-0000-0000-0000-000000000000"), 0), me),
                (device("mps", Some(0), None, 1), me),
            ])
            .unwrap();
        let samples = rx
            .iter()
            .find_map(|m| if let MonitorMsg::Samples(s) = m { Some(s) } else { None })
            .expect("a reading");
        drop(stop_tx);
        handle.join().unwrap();
        let [gpu, other] = &samples[..] else { panic!("{samples:?}") };
        assert_eq!(
            (gpu.device, gpu.source, gpu.rank),
            (DeviceId::Cuda(0), SampleSource::Unavailable, Some(0))
        );
        assert!(gpu.note.is_some());
        assert_eq!((other.device, other.source, other.rank), (DeviceId::Cpu, SampleSource::Process, Some(1)));
        assert!(other.mem_used.is_some_and(|m| m > 0), "this process's memory: {other:?}");
        assert_eq!(other.name.as_deref(), Some("mps:0 (figures: its process)"));
    }
}
