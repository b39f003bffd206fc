//! The rest of a GPU's story, beyond utilization and memory: clocks and why they are held
//! down, PCIe and NVLink traffic, ECC errors, the fan, and who else runs on it. Every figure is
//! optional: one NVML does not give for this GPU is absent (shown as n/a), never 0.

use serde::{Deserialize, Serialize};

/// One process on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: Option<String>,
    /// GPU memory it holds, in bytes.
    pub mem: Option<u64>,
    /// This run's own process.
    pub ours: bool,
}

/// The optional figures of one GPU reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuDetail {
    pub sm_clock_mhz: Option<u32>,
    /// Why the clocks are held down, named; empty when they are not.
    pub throttle: Option<Vec<String>>,
    /// PCIe throughput over NVML's last 20 ms window, KB/s.
    pub pcie_tx_kbs: Option<u32>,
    pub pcie_rx_kbs: Option<u32>,
    /// NVLink data sent and received since the driver loaded, KiB (rates come from two
    /// readings); absent on GPUs without NVLink.
    pub nvlink_tx_kib: Option<u64>,
    pub nvlink_rx_kib: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded (volatile count).
    pub ecc_uncorrected: Option<u64>,
    pub fan_pct: Option<u32>,
    /// The compute processes on the GPU; absent when NVML cannot list them.
    pub processes: Option<Vec<GpuProcess>>,
}

/// NVML's clock-throttle reason bits (nvml.h, `nvmlClocksThrottleReason*`) and their names.
const THROTTLE_REASONS: [(u64, &str); 10] = [
    (0x1, "idle"),
    (0x2, "application clocks"),
    (0x4, "power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "thermal (SW)"),
    (0x40, "thermal (HW)"),
    (0x80, "power brake (HW)"),
    (0x100, "display clocks"),
    (0x200, "user clocks"),
];

/// The named reasons in NVML's throttle bit mask `bits`.
pub fn throttle_names(bits: u64) -> Vec<String> {
    THROTTLE_REASONS.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| (*n).to_owned()).collect()
}

impl GpuDetail {
    /// Throttle reasons that slow training (an idle GPU is not held back).
    pub fn slowing(&self) -> Vec<&str> {
        self.throttle.iter().flatten().map(String::as_str).filter(|r| *r != "idle").collect()
    }

    /// Processes on the GPU that are not this run's, with the memory they hold.
    pub fn others(&self) -> Vec<&GpuProcess> {
        self.processes.iter().flatten().filter(|p| !p.ours).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_are_named_and_idle_is_not_a_slowdown() {
        assert_eq!(throttle_names(0x4 | 0x40), vec!["power cap", "thermal (HW)"]);
        assert!(throttle_names(0).is_empty());
        let d = GpuDetail { throttle: Some(throttle_names(0x1 | 0x20)), ..GpuDetail::default() };
        assert_eq!(d.slowing(), vec!["thermal (SW)"]);
        assert!(GpuDetail::default().slowing().is_empty());
    }
}
