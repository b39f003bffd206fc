//! The devices replicas run on: the `--devices` specification resolved against the machine, and
//! what touches a device before and around training (the driver and libtorch checks, what CUDA
//! devices a process sees, waits with a deadline, out-of-memory in words, the bus bandwidth
//! doctor measured, the GPUs' peak FLOP/s, CUDA's sync debug mode, the CPU threads per thread).

pub mod bus;
pub mod driver;
pub mod gpu_wait;
pub mod intra_op;
pub mod landing;
pub mod late_read;
pub mod libtorch;
pub(crate) mod oom;
pub mod peak;
pub mod sync_debug;
pub(crate) mod visible;

use dpt_core::device::{DeviceError, DeviceId};

/// The libtorch device of `device`.
pub fn tch_device(device: DeviceId) -> tch::Device {
    match device {
        DeviceId::Cpu => tch::Device::Cpu,
        DeviceId::Cuda(i) => tch::Device::Cuda(i),
    }
}

/// What the machine offers, as far as device selection cares.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// CUDA devices libtorch can use.
    pub cuda_devices: usize,
    pub cores: usize,
    /// GPUs the NVIDIA driver shows through NVML (0 without a driver), whatever libtorch makes
    /// of them: more here than in `cuda_devices` means a driver libtorch cannot use — unless
    /// `CUDA_VISIBLE_DEVICES` hides them on purpose.
    pub driver_gpus: usize,
    /// What `CUDA_VISIBLE_DEVICES` says.
    pub visible: Visible,
    /// Whether libtorch was asked (`cuda_devices` is libtorch's count); else the count comes
    /// from NVML and the variable, and what only libtorch can tell (a driver it cannot use) is
    /// left to the process that trains.
    pub cuda_probed: bool,
}

/// `CUDA_VISIBLE_DEVICES`, as far as device selection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visible {
    /// Not set: every GPU is visible.
    Unset,
    /// Set empty or to `-1`: the GPUs are hidden on purpose.
    Hidden,
    /// Set to some ids or UUIDs.
    Named,
}

impl Visible {
    fn read() -> Visible {
        match std::env::var("CUDA_VISIBLE_DEVICES") {
            Err(_) => Visible::Unset,
            Ok(v) if matches!(v.trim(), "" | "-1") => Visible::Hidden,
            Ok(_) => Visible::Named,
        }
    }
}

/// The CPU replicas `--devices auto` makes at most on a machine without a usable GPU: more
/// replicas than this only add allreduce work on a many-core host; the cores are shared out as
/// intra-op threads instead.
pub const AUTO_CPU_REPLICAS: usize = 8;

/// The torch release this build links (for messages).
pub const TORCH_VERSION: &str = "2.11.0";

impl Machine {
    /// Asks the OS, and libtorch only if `spec` may name a GPU (`auto`, `cuda…`): `--devices
    /// cpu` never initializes CUDA.
    pub fn detect(spec: &str) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spec = spec.to_ascii_lowercase();
        let visible = Visible::read();
        if !(spec.contains("auto") || spec.contains("cuda")) {
            return Machine { cuda_devices: 0, cores, driver_gpus: 0, visible, cuda_probed: false };
        }
        let cuda_devices = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
        let driver_gpus = if cuda_devices == 0 {
            crate::monitor::nvml::Gpus::open().map_or(0, |g| g.census().0)
        } else {
            cuda_devices
        };
        Machine { cuda_devices, cores, driver_gpus, visible, cuda_probed: true }
    }

    /// What the machine offers as far as NVML and `CUDA_VISIBLE_DEVICES` tell, without
    /// initializing CUDA in this process (the dashboard front, which only starts the job). Where
    /// NVML cannot count (MIG slices named by UUID), libtorch is asked after all.
    pub fn survey(spec: &str) -> Self {
        let lower = spec.to_ascii_lowercase();
        if !(lower.contains("auto") || lower.contains("cuda")) {
            return Machine::detect(spec);
        }
        let uuids = crate::monitor::nvml::Gpus::open().map(|g| g.uuids()).unwrap_or_default();
        let var = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        match self::visible::visible_count(var.as_deref(), &uuids) {
            Some(cuda_devices) => Machine {
                cuda_devices,
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                driver_gpus: uuids.len(),
                visible: Visible::read(),
                cuda_probed: false,
            },
            None => Machine::detect(spec),
        }
    }

    /// The error for a machine whose driver shows GPUs libtorch cannot use, if it is one.
    fn driver_problem(&self) -> Option<DeviceError> {
        if !self.cuda_probed {
            return None;
        }
        match self.visible {
            // The GPUs are hidden on purpose (`CUDA_VISIBLE_DEVICES=` or `-1`): the CPU it is.
            Visible::Hidden => return None,
            Visible::Named if self.cuda_devices == 0 && self.driver_gpus > 0 => {
                let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
                return Some(DeviceError::NoneVisible { gpus: self.driver_gpus, visible });
            }
            _ => {}
        }
        (self.cuda_devices == 0 && self.driver_gpus > 0).then(|| DeviceError::DriverTooOld {
            gpus: self.driver_gpus,
            driver: crate::monitor::nvml::Gpus::open()
                .ok()
                .and_then(|g| g.census().1)
                .unwrap_or_else(|| "unknown".into()),
            torch: TORCH_VERSION,
        })
    }
}

/// Parses and checks a `--devices` value against `machine`. `auto` means every CUDA device, or
/// one CPU replica per core (at most [`AUTO_CPU_REPLICAS`]) when there is none, unless the
/// driver shows GPUs libtorch cannot use: that is an error, never a silent CPU run. `cpu:N`
/// means N replicas on the CPU; devices may repeat (`cuda:0,cuda:0` runs two replicas on one
/// GPU).
pub fn resolve_devices(spec: &str, machine: Machine) -> Result<Vec<DeviceId>, DeviceError> {
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("auto") {
        if let Some(e) = machine.driver_problem() {
            return Err(e);
        }
        return Ok(if machine.cuda_devices > 0 {
            (0..machine.cuda_devices).map(DeviceId::Cuda).collect()
        } else {
            vec![DeviceId::Cpu; machine.cores.clamp(1, AUTO_CPU_REPLICAS)]
        });
    }
    if spec.to_ascii_lowercase().contains("cuda") {
        if let Some(e) = machine.driver_problem() {
            return Err(e);
        }
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
    if let Some(e) = machine.driver_problem() {
        return Err(e);
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

    const CPU_ONLY: Machine =
        Machine { cuda_devices: 0, cores: 2, driver_gpus: 0, visible: Visible::Unset, cuda_probed: true };
    const TWO_GPUS: Machine =
        Machine { cuda_devices: 2, cores: 16, driver_gpus: 2, visible: Visible::Unset, cuda_probed: true };

    #[test]
    fn a_driver_libtorch_cannot_use_is_an_error_not_224_cpu_replicas() {
        let old_driver = Machine {
            cuda_devices: 0,
            cores: 224,
            driver_gpus: 8,
            visible: Visible::Unset,
            cuda_probed: true,
        };
        for spec in ["auto", "cuda:0"] {
            match resolve_devices(spec, old_driver) {
                Err(DeviceError::DriverTooOld { gpus: 8, .. }) => {}
                other => panic!("{spec}: {other:?}"),
            }
        }
        let e = resolve_devices("auto", old_driver).unwrap_err().to_string();
        assert!(e.contains("CUDA 13.0") && e.contains("R580") && e.contains("--devices cpu"), "{e}");
        assert!(resolve_devices_for_rank("auto", old_driver, 0, 8).is_err());
        // The CPU is still there for whoever asks for it.
        assert_eq!(resolve_devices("cpu:2", old_driver).unwrap(), vec![DeviceId::Cpu; 2]);
        // Without a GPU, auto makes at most AUTO_CPU_REPLICAS replicas.
        let big = Machine {
            cuda_devices: 0,
            cores: 224,
            driver_gpus: 0,
            visible: Visible::Unset,
            cuda_probed: true,
        };
        assert_eq!(resolve_devices("auto", big).unwrap(), vec![DeviceId::Cpu; AUTO_CPU_REPLICAS]);
        assert_eq!(cpu_threads_per_replica(&resolve_devices("auto", big).unwrap(), 224), 28);
        // GPUs hidden on purpose are no driver problem; ids that hide them all are said as such.
        let hidden = Machine { visible: Visible::Hidden, ..old_driver };
        assert_eq!(resolve_devices("auto", hidden).unwrap(), vec![DeviceId::Cpu; AUTO_CPU_REPLICAS]);
        let wrong_ids = Machine { visible: Visible::Named, ..old_driver };
        assert!(matches!(resolve_devices("auto", wrong_ids), Err(DeviceError::NoneVisible { .. })));
        // The dashboard front counts through NVML and leaves the driver question to the job.
        let surveyed = Machine { cuda_devices: 8, cuda_probed: false, ..old_driver };
        assert_eq!(resolve_devices("auto", surveyed).unwrap().len(), 8);
    }

    #[test]
    fn a_survey_of_this_machine_does_not_ask_libtorch() {
        let m = Machine::survey("auto");
        assert!(!m.cuda_probed);
        assert!(!Machine::survey("cpu:2").cuda_probed);
    }

    #[test]
    fn auto_picks_gpus_else_one_cpu_replica_per_core() {
        assert_eq!(resolve_devices("auto", CPU_ONLY).unwrap(), vec![DeviceId::Cpu; 2]);
        assert_eq!(resolve_devices("auto", TWO_GPUS).unwrap(), vec![DeviceId::Cuda(0), DeviceId::Cuda(1)]);
    }

    #[test]
    fn auto_under_a_launcher_takes_the_local_gpu_or_a_share_of_the_cores() {
        assert_eq!(resolve_devices_for_rank("auto", TWO_GPUS, 1, 2).unwrap(), vec![DeviceId::Cuda(1)]);
        let one_visible = Machine {
            cuda_devices: 1,
            cores: 16,
            driver_gpus: 1,
            visible: Visible::Named,
            cuda_probed: true,
        };
        assert_eq!(resolve_devices_for_rank("auto", one_visible, 3, 4).unwrap(), vec![DeviceId::Cuda(0)]);
        let cpu8 =
            Machine { cuda_devices: 0, cores: 8, driver_gpus: 0, visible: Visible::Unset, cuda_probed: true };
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
