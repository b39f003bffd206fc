//! Which backend a multi-process run sums its gradients with, decided at the rendezvous from
//! every rank's devices, so every rank decides alike: NCCL when every rank trains on GPUs of
//! its own, Gloo otherwise. Two ranks on one GPU (`torchrun --nproc-per-node 2` on a one-GPU
//! machine) cannot use NCCL, which refuses a communicator whose ranks share a device ("invalid
//! usage"): under `--dist-backend auto` they use Gloo and the start record says why; with
//! `nccl` asked for, the run is refused naming the ranks, the GPU and the fix. NCCL's
//! communicator is then made at once, under a deadline.

use std::time::Duration;

use tch::{Device, Kind, Tensor};

use super::world::DistError;
use crate::settings::DistBackend;
use dpt_core::device::DeviceId;
use dpt_sys::c10d::{Backend, Group};

/// One rank's devices as it checked in.
#[derive(Debug, Clone, Copy)]
pub struct RankDevices<'a> {
    pub host: &'a str,
    pub devices: &'a [DeviceId],
    /// What identifies each device's GPU across the machine (its UUID, else host and index);
    /// empty for a CPU device.
    pub gpus: &'a [String],
}

/// A GPU more than one rank trains on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedGpu {
    /// `cuda:0 on host h`.
    pub gpu: String,
    pub ranks: Vec<usize>,
}

impl SharedGpu {
    /// `ranks 0 and 1`.
    pub fn ranks_text(&self) -> String {
        let all: Vec<String> = self.ranks.iter().map(ToString::to_string).collect();
        match all.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("ranks {} and {last}", rest.join(", ")),
            _ => format!("rank {}", all.join("")),
        }
    }
}

/// The backend chosen, and why it is not the one `auto` would take for GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    pub note: Option<String>,
}

/// What identifies GPU `index` of `host` when its UUID is unknown.
pub fn fallback_identity(host: &str, index: usize) -> String {
    format!("{host}/cuda:{index}")
}

/// The first GPU that several ranks train on, with those ranks.
pub fn shared_gpu(ranks: &[RankDevices]) -> Option<SharedGpu> {
    let mut seen: Vec<(&str, String, Vec<usize>)> = Vec::new();
    for (rank, r) in ranks.iter().enumerate() {
        for (device, id) in r.devices.iter().zip(r.gpus) {
            let DeviceId::Cuda(_) = device else { continue };
            match seen.iter_mut().find(|(key, _, _)| key == id) {
                Some((_, _, holders)) if !holders.contains(&rank) => holders.push(rank),
                Some(_) => {}
                None => seen.push((id.as_str(), format!("{device} on host {}", r.host), vec![rank])),
            }
        }
    }
    seen.into_iter().find(|(_, _, holders)| holders.len() > 1).map(|(_, gpu, ranks)| SharedGpu { gpu, ranks })
}

/// The backend for `asked` given every rank's devices; `Err` when NCCL is asked for on a GPU
/// that ranks share.
pub fn choose(asked: DistBackend, ranks: &[RankDevices]) -> Result<Choice, SharedGpu> {
    let all_gpus = ranks.iter().all(|r| r.devices.iter().all(|d| matches!(d, DeviceId::Cuda(_))));
    let plain = |backend| Ok(Choice { backend, note: None });
    match asked {
        DistBackend::Gloo => plain(Backend::Gloo),
        DistBackend::Auto if !all_gpus => plain(Backend::Gloo),
        DistBackend::Auto | DistBackend::Nccl => match (shared_gpu(ranks), asked) {
            (None, _) => plain(Backend::Nccl),
            (Some(shared), DistBackend::Nccl) => Err(shared),
            (Some(shared), _) => Ok(Choice {
                backend: Backend::Gloo,
                note: Some(format!(
                    "{} share {}, and NCCL needs a GPU per rank",
                    shared.ranks_text(),
                    shared.gpu
                )),
            }),
        },
    }
}

/// Makes NCCL's communicator now, with one element broadcast and the device synchronized (as
/// `init_process_group(device_id=…)` does eagerly), under a watchdog of `timeout`: made lazily
/// inside the first real collective, a set-up that hangs (PCIe ACS on, some VMs, a wrong
/// `NCCL_SOCKET_IFNAME`) would freeze the run before step 0 without a line.
pub(super) fn connect_nccl(
    group: &Group,
    device: Device,
    size: usize,
    timeout: Duration,
) -> Result<(), DistError> {
    let waiting = crate::device::gpu_wait::Waiting {
        phase: format!("NCCL's communicator set-up across {size} ranks"),
        device: match device {
            Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".to_owned(),
        },
        timeout,
    };
    let _watch =
        crate::device::gpu_wait::Watchdog::arm(&waiting, crate::device::gpu_wait::Watchdog::leave_on_expiry)
            .map_err(|e| DistError::Lost(format!("cannot start a thread: {e}")))?;
    let mut one = [Tensor::ones([1], (Kind::Float, device))];
    group.broadcast(&mut one, 0)?.wait_on_stream()?;
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank<'a>(host: &'a str, devices: &'a [DeviceId], gpus: &'a [String]) -> RankDevices<'a> {
        RankDevices { host, devices, gpus }
    }

    #[test]
    fn two_ranks_on_one_gpu_use_gloo_under_auto_and_are_refused_nccl() {
        let one = [DeviceId::Cuda(0)];
        let same = ["GPU-aa".to_owned()];
        let ranks = [rank("h", &one, &same), rank("h", &one, &same)];
        let chosen = choose(DistBackend::Auto, &ranks).unwrap();
        assert_eq!(chosen.backend, Backend::Gloo);
        assert_eq!(
            chosen.note.as_deref(),
            Some("ranks 0 and 1 share cuda:0 on host h, and NCCL needs a GPU per rank")
        );
        let refused = choose(DistBackend::Nccl, &ranks).unwrap_err();
        assert_eq!(refused, SharedGpu { gpu: "cuda:0 on host h".into(), ranks: vec![0, 1] });
        assert_eq!(choose(DistBackend::Gloo, &ranks).unwrap().backend, Backend::Gloo);
    }

    #[test]
    fn ranks_on_gpus_of_their_own_use_nccl_and_cpus_gloo() {
        let (a, b) = (["GPU-aa".to_owned()], ["GPU-bb".to_owned()]);
        let (d0, d1) = ([DeviceId::Cuda(0)], [DeviceId::Cuda(1)]);
        // The same index on two hosts, or two GPUs of one host: no GPU is shared.
        let apart = [rank("h1", &d0, &a), rank("h2", &d0, &b)];
        assert_eq!(choose(DistBackend::Auto, &apart).unwrap(), Choice { backend: Backend::Nccl, note: None });
        let local = [rank("h", &d0, &a), rank("h", &d1, &b)];
        assert_eq!(choose(DistBackend::Nccl, &local).unwrap().backend, Backend::Nccl);
        // Without UUIDs, host and index identify the GPU.
        let (x, y) = ([fallback_identity("h", 0)], [fallback_identity("h", 0)]);
        let guessed = [rank("h", &d0, &x), rank("h", &d0, &y)];
        assert_eq!(choose(DistBackend::Auto, &guessed).unwrap().backend, Backend::Gloo);
        let cpu = [DeviceId::Cpu];
        let none = [String::new()];
        let cpus = [rank("h", &cpu, &none), rank("h", &cpu, &none)];
        assert_eq!(choose(DistBackend::Auto, &cpus).unwrap(), Choice { backend: Backend::Gloo, note: None });
    }

    #[test]
    fn three_ranks_sharing_are_listed() {
        let d = [DeviceId::Cuda(0)];
        let g = ["GPU-aa".to_owned()];
        let ranks = [rank("h", &d, &g), rank("h", &d, &g), rank("h", &d, &g)];
        assert_eq!(shared_gpu(&ranks).unwrap().ranks_text(), "ranks 0, 1 and 2");
    }
}
