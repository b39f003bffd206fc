//! This process's CPU and memory use, the fallback figures when NVML has none.

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, SampleSource};

pub struct ProcessProbe {
    /// `None` where the OS gives sysinfo nothing to read; every figure is then absent.
    system: Option<System>,
    pid: Option<Pid>,
}

/// One reading of the process.
pub struct ProcessReading {
    cpu_pct: Option<f64>,
    rss: Option<u64>,
    total: Option<u64>,
}

impl ProcessProbe {
    /// This process.
    #[cfg(feature = "train")]
    pub fn new() -> Self {
        ProcessProbe::of(sysinfo::get_current_pid().ok())
    }

    /// A probe of another process (a script's rank).
    pub fn of_pid(pid: u32) -> Self {
        ProcessProbe::of(Some(Pid::from_u32(pid)))
    }

    fn of(pid: Option<Pid>) -> Self {
        let system = System::new().ok().map(|mut s| {
            s.refresh_memory();
            s
        });
        let mut probe = ProcessProbe { system, pid };
        // CPU use is a difference between two refreshes; take the first one now.
        probe.refresh();
        probe
    }

    fn refresh(&mut self) {
        if let (Some(system), Some(pid)) = (&mut self.system, self.pid) {
            system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&[pid]),
                true,
                ProcessRefreshKind::nothing().with_cpu().with_memory(),
            );
        }
    }

    pub fn sample(&mut self) -> ProcessReading {
        self.refresh();
        let system = self.system.as_ref();
        let process = system.zip(self.pid).and_then(|(s, pid)| s.process(pid));
        ProcessReading {
            cpu_pct: process.map(|p| f64::from(p.cpu_usage())),
            rss: process.map(|p| p.memory()),
            total: system.map(System::total_memory).filter(|&t| t > 0),
        }
    }
}

impl ProcessReading {
    pub fn for_device(&self, device: DeviceId) -> DeviceSample {
        DeviceSample {
            device,
            source: SampleSource::Process,
            util_pct: self.cpu_pct,
            mem_used: self.rss,
            mem_total: self.total,
            temp_c: None,
            power_w: None,
            name: None,
            rank: None,
            host: None,
            note: None,
            gpu: None,
        }
    }
}
