//! The `--devices` specification: which devices the replicas run on.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One replica's device; written `cpu` or `cuda:N` on the command line, in files and on the
/// wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum DeviceId {
    Cpu,
    Cuda(usize),
}

impl DeviceId {
    /// The libtorch device.
    pub fn to_tch(self) -> tch::Device {
        match self {
            DeviceId::Cpu => tch::Device::Cpu,
            DeviceId::Cuda(i) => tch::Device::Cuda(i),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cpu => write!(f, "cpu"),
            DeviceId::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl From<DeviceId> for String {
    fn from(d: DeviceId) -> String {
        d.to_string()
    }
}

impl std::str::FromStr for DeviceId {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        match s.strip_prefix("cuda:") {
            Some(n) => n.parse().map(DeviceId::Cuda).map_err(|_| DeviceError::Unknown(s.to_owned())),
            None if s == "cpu" => Ok(DeviceId::Cpu),
            None => Err(DeviceError::Unknown(s.to_owned())),
        }
    }
}

impl TryFrom<String> for DeviceId {
    type Error = DeviceError;

    fn try_from(s: String) -> Result<Self, DeviceError> {
        s.parse()
    }
}

/// A `--devices` value that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("--devices is empty; use 'auto', 'cpu', 'cpu:N' or a list such as 'cuda:0,cuda:1'")]
    Empty,
    #[error("unknown device '{0}' in --devices; use 'auto', 'cpu', 'cpu:N' or 'cuda:N' (comma-separated)")]
    Unknown(String),
    #[error("{device} does not exist: this machine has {count} CUDA device(s){hint}")]
    Absent { device: String, count: usize, hint: &'static str },
}

/// What the machine offers, as far as device selection cares.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub cuda_devices: usize,
    pub cores: usize,
}

impl Machine {
    /// Asks libtorch and the OS.
    pub fn detect() -> Self {
        Machine {
            cuda_devices: usize::try_from(tch::Cuda::device_count()).unwrap_or(0),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Parses and checks a `--devices` value against `machine`. `auto` means every CUDA device, or
/// one CPU replica per core when there is none; `cpu:N` means N replicas on the CPU; devices may
/// repeat (`cuda:0,cuda:0` runs two replicas on one GPU).
pub fn resolve_devices(spec: &str, machine: Machine) -> Result<Vec<DeviceId>, DeviceError> {
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("auto") {
        return Ok(if machine.cuda_devices > 0 {
            (0..machine.cuda_devices).map(DeviceId::Cuda).collect()
        } else {
            vec![DeviceId::Cpu; machine.cores.max(1)]
        });
    }
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        if lower == "cpu" {
            out.push(DeviceId::Cpu);
        } else if let Some(n) = lower.strip_prefix("cpu:") {
            match n.parse::<usize>() {
                Ok(n) if n > 0 => out.extend(std::iter::repeat_n(DeviceId::Cpu, n)),
                _ => return Err(DeviceError::Unknown(item.to_owned())),
            }
        } else if let Some(n) = lower.strip_prefix("cuda:") {
            let index = n.parse::<usize>().map_err(|_| DeviceError::Unknown(item.to_owned()))?;
            if index >= machine.cuda_devices {
                let hint = if machine.cuda_devices == 0 {
                    "; use --devices cpu or cpu:N"
                } else {
                    "; list them with nvidia-smi"
                };
                return Err(DeviceError::Absent {
                    device: item.to_owned(),
                    count: machine.cuda_devices,
                    hint,
                });
            }
            out.push(DeviceId::Cuda(index));
        } else if lower == "cuda" {
            if machine.cuda_devices == 0 {
                return Err(DeviceError::Absent {
                    device: item.to_owned(),
                    count: 0,
                    hint: "; use --devices cpu or cpu:N",
                });
            }
            out.push(DeviceId::Cuda(0));
        } else {
            return Err(DeviceError::Unknown(item.to_owned()));
        }
    }
    if out.is_empty() {
        return Err(DeviceError::Empty);
    }
    Ok(out)
}

/// `--devices` for one process of a multi-process run started `local_world_size` to a node:
/// `auto` takes `cuda:LOCAL_RANK` (torchrun's one process per GPU; modulo the GPUs this
/// process sees, for launchers that hide the others), or this process's share of the cores on
/// a CPU-only node. Anything else means what it means for one process.
pub fn resolve_devices_for_rank(
    spec: &str,
    machine: Machine,
    local_rank: usize,
    local_world_size: usize,
) -> Result<Vec<DeviceId>, DeviceError> {
    if !spec.trim().eq_ignore_ascii_case("auto") {
        return resolve_devices(spec, machine);
    }
    Ok(if machine.cuda_devices > 0 {
        vec![DeviceId::Cuda(local_rank % machine.cuda_devices)]
    } else {
        vec![DeviceId::Cpu; (machine.cores / local_world_size.max(1)).max(1)]
    })
}

/// Intra-op threads for each replica: the cores shared evenly among the CPU replicas.
pub fn cpu_threads_per_replica(devices: &[DeviceId], cores: usize) -> usize {
    let cpu = devices.iter().filter(|d| **d == DeviceId::Cpu).count();
    cores.checked_div(cpu).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU_ONLY: Machine = Machine { cuda_devices: 0, cores: 2 };
    const TWO_GPUS: Machine = Machine { cuda_devices: 2, cores: 16 };

    #[test]
    fn auto_picks_gpus_else_one_cpu_replica_per_core() {
        assert_eq!(resolve_devices("auto", CPU_ONLY).unwrap(), vec![DeviceId::Cpu; 2]);
        assert_eq!(resolve_devices("auto", TWO_GPUS).unwrap(), vec![DeviceId::Cuda(0), DeviceId::Cuda(1)]);
    }

    #[test]
    fn auto_under_a_launcher_takes_the_local_gpu_or_a_share_of_the_cores() {
        assert_eq!(resolve_devices_for_rank("auto", TWO_GPUS, 1, 2).unwrap(), vec![DeviceId::Cuda(1)]);
        let one_visible = Machine { cuda_devices: 1, cores: 16 };
        assert_eq!(resolve_devices_for_rank("auto", one_visible, 3, 4).unwrap(), vec![DeviceId::Cuda(0)]);
        let cpu8 = Machine { cuda_devices: 0, cores: 8 };
        assert_eq!(resolve_devices_for_rank("auto", cpu8, 0, 2).unwrap(), vec![DeviceId::Cpu; 4]);
        assert_eq!(resolve_devices_for_rank("cpu:2", cpu8, 1, 2).unwrap(), vec![DeviceId::Cpu; 2]);
    }

    #[test]
    fn lists_repeats_and_cpu_counts() {
        assert_eq!(resolve_devices("cpu:3", CPU_ONLY).unwrap(), vec![DeviceId::Cpu; 3]);
        assert_eq!(resolve_devices("cuda:0, cuda:0", TWO_GPUS).unwrap(), vec![DeviceId::Cuda(0); 2]);
        assert_eq!(resolve_devices("cuda:1,cpu", TWO_GPUS).unwrap(), vec![DeviceId::Cuda(1), DeviceId::Cpu]);
    }

    #[test]
    fn devices_are_written_as_their_names() {
        for d in [DeviceId::Cpu, DeviceId::Cuda(3)] {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{d}\""));
            assert_eq!(serde_json::from_str::<DeviceId>(&json).unwrap(), d);
        }
        assert!(serde_json::from_str::<DeviceId>("\"tpu:0\"").is_err());
    }

    #[test]
    fn bad_specs_are_errors() {
        assert_eq!(resolve_devices("", CPU_ONLY), Err(DeviceError::Empty));
        assert!(matches!(resolve_devices("gpu0", CPU_ONLY), Err(DeviceError::Unknown(_))));
        assert!(matches!(resolve_devices("cpu:0", CPU_ONLY), Err(DeviceError::Unknown(_))));
        assert!(matches!(resolve_devices("cuda:2", TWO_GPUS), Err(DeviceError::Absent { count: 2, .. })));
        assert!(matches!(resolve_devices("cuda:0", CPU_ONLY), Err(DeviceError::Absent { count: 0, .. })));
    }
}
