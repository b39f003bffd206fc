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
    /// Whether this run's process could be told apart in `processes`.
    #[serde(default)]
    pub pids: PidMatch,
}

/// How NVML's process ids relate to this process's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PidMatch {
    /// NVML's pids are in this process's namespace: ours is known by its pid.
    #[default]
    Matched,
    /// NVML lists pids of another namespace (a container without the host's pid namespace,
    /// where NVML reports host pids), and the run's own context is on the GPU: the one
    /// process listed is ours.
    Inferred,
    /// As above with several processes listed: which one is ours cannot be told, so none is
    /// called foreign.
    Unmatched,
}

/// Which of the processes NVML lists on a GPU (`listed`, their pids) are this run's own:
/// `own` are this process's pids (its own, and the others `/proc/self/status` gives in `NSpid`),
/// `holds_context` whether this process has made its CUDA context on the GPU. NVML reports
/// pids of the host's namespace (the driver has no notion of pid namespaces), so inside a
/// container our pid is not among them even while our context is there; the run's own process
/// is then never called foreign.
pub fn recognise(listed: &[u32], own: &[u32], holds_context: bool) -> (Vec<bool>, PidMatch) {
    let ours: Vec<bool> = listed.iter().map(|p| own.contains(p)).collect();
    if ours.contains(&true) || !holds_context || listed.is_empty() {
        return (ours, PidMatch::Matched);
    }
    if listed.len() == 1 {
        (vec![true], PidMatch::Inferred)
    } else {
        (ours, PidMatch::Unmatched)
    }
}

/// This process's pids: its own and those `NSpid` lists in `status` (`/proc/self/status`).
pub fn own_pids(own: u32, status: &str) -> Vec<u32> {
    let mut pids = vec![own];
    let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap_or("");
    pids.extend(nspid.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).filter(|p| *p != own));
    pids
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

    /// Processes on the GPU that are not this run's, with the memory they hold (none when the
    /// pids cannot be matched).
    pub fn others(&self) -> Vec<&GpuProcess> {
        if self.pids == PidMatch::Unmatched {
            return Vec::new();
        }
        self.processes.iter().flatten().filter(|p| !p.ours).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_is_recognised_by_pid_in_its_own_namespace() {
        // Our pid 4242 listed beside a foreign 77.
        assert_eq!(recognise(&[77, 4242], &[4242], true), (vec![false, true], PidMatch::Matched));
        // Before our context exists, whatever is listed is someone else's.
        assert_eq!(recognise(&[77], &[4242], false), (vec![false], PidMatch::Matched));
    }

    #[test]
    fn in_a_container_with_host_pids_the_run_is_never_called_foreign() {
        // NVML reports the host's pid 913557 for our process, which is 42 in the container.
        assert_eq!(recognise(&[913557], &[42], true), (vec![true], PidMatch::Inferred));
        let (ours, how) = recognise(&[913557, 100200], &[42], true);
        assert_eq!((ours, how), (vec![false, false], PidMatch::Unmatched));
        let d = GpuDetail {
            processes: Some(vec![
                GpuProcess { pid: 913557, name: None, mem: Some(1 << 30), ours: false },
                GpuProcess { pid: 100200, name: None, mem: Some(1 << 30), ours: false },
            ]),
            pids: PidMatch::Unmatched,
            ..GpuDetail::default()
        };
        assert!(d.others().is_empty(), "no warning about a process that may be ours");
        // A host /proc (or --pid=host) shows the outer pid in NSpid: matched by pid again.
        let own = own_pids(42, "Name:\tdpt-tui\nNSpid:\t913557\t42\n");
        assert_eq!(own, vec![42, 913557]);
        assert_eq!(recognise(&[913557, 100200], &own, true).1, PidMatch::Matched);
    }

    #[test]
    fn throttle_bits_are_named_and_idle_is_not_a_slowdown() {
        assert_eq!(throttle_names(0x4 | 0x40), vec!["power cap", "thermal (HW)"]);
        assert!(throttle_names(0).is_empty());
        let d = GpuDetail { throttle: Some(throttle_names(0x1 | 0x20)), ..GpuDetail::default() };
        assert_eq!(d.slowing(), vec!["thermal (SW)"]);
        assert!(GpuDetail::default().slowing().is_empty());
    }
}
