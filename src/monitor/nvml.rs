//! GPUs through NVML, loaded at run time; absent NVML is an ordinary outcome, not an error.
//!
//! NVML numbers GPUs by PCI bus and ignores `CUDA_VISIBLE_DEVICES`; CUDA numbers the visible
//! ones, by speed unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`. So a CUDA device is found in NVML by
//! what identifies it (its UUID, a MIG slice's UUID, its PCI bus id), never by its index; only
//! when the identity cannot be read is the index used, and the panel says so.

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use dpt_core::monitor::gpu::{own_pids, recognise, throttle_names, GpuDetail, GpuProcess, PidMatch};

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, SampleSource};
use dpt_sys::identity::CudaIdentity;

pub struct Gpus {
    nvml: Nvml,
}

/// How a CUDA device was found among NVML's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// By the UUID CUDA reports (`GPU-…`), or a MIG slice's (`MIG-…`).
    Uuid(String),
    /// By PCI domain, bus and device.
    PciBus(String),
    /// By index: the identity could not be read; right only with `CUDA_DEVICE_ORDER=PCI_BUS_ID`
    /// and no `CUDA_VISIBLE_DEVICES`.
    Index(u32),
}

/// Where to look for a CUDA device in NVML, in order: its UUID, as a MIG slice, its PCI bus
/// id; its index only without an identity.
pub fn lookups(identity: Option<&CudaIdentity>, cuda_index: usize) -> Vec<Matched> {
    match identity {
        Some(id) => {
            let uuid = id.nvml_uuid();
            let mig = format!("MIG-{}", &uuid[4..]);
            vec![Matched::Uuid(uuid), Matched::Uuid(mig), Matched::PciBus(id.nvml_pci_bus_id())]
        }
        None => u32::try_from(cuda_index).map(|i| vec![Matched::Index(i)]).unwrap_or_default(),
    }
}

/// Whether this process made a CUDA context on `cuda_index`. A binary built without training
/// never does: the processes on its GPUs are the script's.
fn this_process_holds_context(cuda_index: usize) -> bool {
    #[cfg(feature = "train")]
    return dpt_sys::c10d::context_made(cuda_index);
    #[cfg(not(feature = "train"))]
    {
        let _ = cuda_index;
        false
    }
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

    /// The newest CUDA version the driver supports, as NVML gives it (12040 = CUDA 12.4).
    pub fn cuda_driver_version(&self) -> Option<i32> {
        self.nvml.sys_cuda_driver_version().ok()
    }

    /// The UUIDs of the GPUs the driver shows, in NVML order (a GPU whose UUID cannot be read
    /// is listed as an empty string).
    pub fn uuids(&self) -> Vec<String> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count).map(|i| self.nvml.device_by_index(i).and_then(|d| d.uuid()).unwrap_or_default()).collect()
    }

    /// The NVML device a CUDA device is, and how it was found.
    pub fn find(
        &self,
        identity: Option<&CudaIdentity>,
        cuda_index: usize,
    ) -> Result<(Device<'_>, Matched), String> {
        for how in lookups(identity, cuda_index) {
            let found = match &how {
                Matched::Uuid(u) => self.nvml.device_by_uuid(u.as_str()),
                Matched::PciBus(b) => self.nvml.device_by_pci_bus_id(b.as_str()),
                Matched::Index(i) => self.nvml.device_by_index(*i),
            };
            if let Ok(dev) = found {
                return Ok((dev, how));
            }
        }
        Err(match identity {
            Some(id) => {
                format!("NVML shows no GPU with UUID {} or PCI bus {}", id.nvml_uuid(), id.nvml_pci_bus_id())
            }
            None => format!("NVML cannot open GPU {cuda_index}"),
        })
    }

    /// A reading of CUDA device `cuda_index` (identified by `identity`), or why NVML cannot
    /// give one. A MIG slice has its own memory but no utilization of its own: that figure is
    /// absent rather than the parent GPU's.
    pub fn sample(&self, identity: Option<&CudaIdentity>, cuda_index: usize) -> Result<DeviceSample, String> {
        let found = self.find(identity, cuda_index)?;
        Ok(self.read(found, cuda_index))
    }

    /// A reading of the GPU with `uuid` (`GPU-…` or `MIG-…`, as a script reports it), shown as
    /// CUDA device `cuda_index`.
    pub fn sample_uuid(&self, uuid: &str, cuda_index: usize) -> Result<DeviceSample, String> {
        let dev = self
            .nvml
            .device_by_uuid(uuid)
            .map_err(|e| format!("NVML shows no GPU with UUID {uuid} ({e})"))?;
        Ok(self.read((dev, Matched::Uuid(uuid.to_owned())), cuda_index))
    }

    fn read(&self, (dev, how): (Device<'_>, Matched), cuda_index: usize) -> DeviceSample {
        let mem = dev.memory_info().ok();
        let mig = matches!(&how, Matched::Uuid(u) if u.starts_with("MIG-"));
        let note = match how {
            Matched::Index(_) => Some("matched by index: set CUDA_DEVICE_ORDER=PCI_BUS_ID".to_owned()),
            _ if mig => Some("MIG slice: utilization is not reported per slice".to_owned()),
            _ => None,
        };
        DeviceSample {
            device: DeviceId::Cuda(cuda_index),
            source: SampleSource::Nvml,
            util_pct: if mig { None } else { dev.utilization_rates().ok().map(|u| f64::from(u.gpu)) },
            mem_used: mem.as_ref().map(|m| m.used),
            mem_total: mem.as_ref().map(|m| m.total),
            temp_c: dev.temperature(TemperatureSensor::Gpu).ok(),
            power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            name: dev.name().ok(),
            rank: None,
            host: None,
            note,
            gpu: Some(Box::new(self.detail(&dev, cuda_index))),
        }
    }

    /// The further figures of `dev` (this process's CUDA device `cuda_index`), each only where
    /// NVML gives it.
    fn detail(&self, dev: &Device<'_>, cuda_index: usize) -> GpuDetail {
        let nvlink = |field: u32| -> Option<u64> {
            let samples = dev.field_values_for(&[FieldId(field)]).ok()?;
            match samples.into_iter().next()?.ok()?.value.ok()? {
                SampleValue::U64(v) => Some(v),
                SampleValue::U32(v) => Some(u64::from(v)),
                _ => None,
            }
        };
        let own =
            own_pids(std::process::id(), &std::fs::read_to_string("/proc/self/status").unwrap_or_default());
        // Read after the list: a context made between the two is then not yet listed, and the
        // one listed process is not taken for ours.
        let listed = dev.running_compute_processes().ok();
        let holds_context = this_process_holds_context(cuda_index);
        let mut pids = PidMatch::Matched;
        let processes = listed.map(|list| {
            let (ours, how) = recognise(&list.iter().map(|p| p.pid).collect::<Vec<_>>(), &own, holds_context);
            pids = how;
            list.into_iter()
                .zip(ours)
                .map(|(p, ours)| GpuProcess {
                    pid: p.pid,
                    name: self.nvml.sys_process_name(p.pid, 64).ok().map(|n| {
                        // NVML gives the executable's path; the name is what identifies it.
                        std::path::Path::new(&n)
                            .file_name()
                            .map_or(n.clone(), |f| f.to_string_lossy().into_owned())
                    }),
                    mem: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                    ours,
                })
                .collect()
        });
        GpuDetail {
            sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
            throttle: dev.current_throttle_reasons().ok().map(|r| throttle_names(r.bits())),
            pcie_tx_kbs: dev.pcie_throughput(PcieUtilCounter::Send).ok(),
            pcie_rx_kbs: dev.pcie_throughput(PcieUtilCounter::Receive).ok(),
            // NVML's field ids for the NVLink data counters (nvml.h): TX 138, RX 139.
            nvlink_tx_kib: nvlink(138),
            nvlink_rx_kib: nvlink(139),
            ecc_uncorrected: dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
            fan_pct: dev.fan_speed(0).ok(),
            processes,
            pids,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(bus: i32, first: u8) -> CudaIdentity {
        let mut uuid = [0u8; 16];
        uuid[0] = first;
        CudaIdentity { major: 8, minor: 0, pci_domain: 0, pci_bus: bus, pci_device: 0, uuid }
    }

    #[test]
    fn devices_are_looked_up_by_identity_not_index() {
        // CUDA_VISIBLE_DEVICES=4,5: this process's cuda:0 is the machine's fifth GPU; its UUID
        // and bus say so whatever the index.
        let l = lookups(Some(&id(0x81, 0xab)), 0);
        assert_eq!(l[0], Matched::Uuid("GPU-ab000000-0000-0000-0000-000000000000".into()));
        assert_eq!(l[1], Matched::Uuid("MIG-ab000000-0000-0000-0000-000000000000".into()), "a MIG slice");
        assert_eq!(l[2], Matched::PciBus("00000000:81:00.0".into()));
        assert!(
            !l.iter().any(|m| matches!(m, Matched::Index(_))),
            "never the index when the identity is known"
        );
        // Without an identity, the index is all there is, and the panel will say so.
        assert_eq!(lookups(None, 3), vec![Matched::Index(3)]);
    }
}
