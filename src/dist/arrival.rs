//! A rank's check-in at the rendezvous: its host, devices, their GPUs' identities and the
//! settings every rank must share; the checks made on all of them before the process group
//! exists.

use serde::{Deserialize, Serialize};

use super::backend_choice::{choose, fallback_identity, Choice, RankDevices};
use super::world::DistError;
use crate::settings::DistBackend;
use dpt_core::device::DeviceId;

/// What each rank says when it arrives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Arrival {
    pub(super) host: String,
    pub(super) replicas: usize,
    #[serde(default)]
    pub(super) devices: Vec<DeviceId>,
    /// Each device's GPU as the whole machine knows it (NVML's UUID; host and index when CUDA
    /// cannot say; empty for a CPU device).
    #[serde(default)]
    pub(super) gpus: Vec<String>,
    /// The settings every rank must share, as a JSON object.
    pub(super) settings: serde_json::Value,
}

impl Arrival {
    /// This rank's check-in.
    pub(super) fn of(host: String, devices: &[DeviceId], settings: serde_json::Value) -> Arrival {
        let gpus = devices
            .iter()
            .map(|d| match d {
                DeviceId::Cuda(i) => dpt_sys::c10d::cuda_identity(*i)
                    .map_or_else(|_| fallback_identity(&host, *i), |id| id.nvml_uuid()),
                DeviceId::Cpu => String::new(),
            })
            .collect();
        Arrival { host, replicas: devices.len(), devices: devices.to_vec(), gpus, settings }
    }
}

/// The backend every rank takes for `asked` (see `backend_choice`): decided from every rank's
/// check-in, so alike everywhere.
pub(super) fn backend(asked: DistBackend, arrivals: &[Arrival]) -> Result<Choice, DistError> {
    let ranks: Vec<RankDevices> =
        arrivals.iter().map(|a| RankDevices { host: &a.host, devices: &a.devices, gpus: &a.gpus }).collect();
    choose(asked, &ranks)
        .map_err(|shared| DistError::SharedGpu { ranks: shared.ranks_text(), gpu: shared.gpu })
}

pub(super) fn check_settings(arrivals: &[Arrival]) -> Result<(), DistError> {
    let ours = &arrivals[0].settings;
    for (rank, a) in arrivals.iter().enumerate().skip(1) {
        if let (Some(o), Some(t)) = (ours.as_object(), a.settings.as_object()) {
            for (field, value) in o {
                let theirs = t.get(field).cloned().unwrap_or(serde_json::Value::Null);
                if &theirs != value {
                    return Err(DistError::Mismatch {
                        rank,
                        host: a.host.clone(),
                        field: field.clone(),
                        theirs: theirs.to_string(),
                        ours: value.to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpt_sys::c10d::Backend;

    fn on_gpu(host: &str, uuid: &str) -> Arrival {
        Arrival {
            host: host.into(),
            replicas: 1,
            devices: vec![DeviceId::Cuda(0)],
            gpus: vec![uuid.into()],
            settings: serde_json::json!({}),
        }
    }

    #[test]
    fn every_rank_takes_the_backend_from_all_check_ins_and_a_shared_gpu_refuses_nccl_in_one_line() {
        let shared = [on_gpu("h100", "GPU-1"), on_gpu("h100", "GPU-1")];
        let auto = backend(DistBackend::Auto, &shared).unwrap();
        assert_eq!(auto.backend, Backend::Gloo);
        let e = backend(DistBackend::Nccl, &shared).unwrap_err();
        assert!(e.is_input(), "bad input: exit 2");
        assert_eq!(
            e.to_string(),
            "ranks 0 and 1 share cuda:0 on host h100, and NCCL needs a GPU per rank: use --dist-backend auto (Gloo there) or start one rank per GPU"
        );
        let apart = [on_gpu("h100", "GPU-1"), on_gpu("h100", "GPU-2")];
        assert_eq!(backend(DistBackend::Auto, &apart).unwrap().backend, Backend::Nccl);
        // A check-in of an earlier version has no GPU identities: nothing is taken as shared.
        let old: Vec<Arrival> = shared.iter().cloned().map(|a| Arrival { gpus: Vec::new(), ..a }).collect();
        assert_eq!(backend(DistBackend::Auto, &old).unwrap().backend, Backend::Nccl);
    }
}
