//! Per-device state: the latest sample, a history for the sparkline, and the step time of the
//! replicas on the device, so a straggler stands out.

use std::collections::VecDeque;

use crate::monitor::{DeviceSample, SampleSource};
use crate::record::straggler::stragglers;
use crate::record::StepStats;
use dpt_core::device::DeviceId;

/// How many samples the history keeps (two minutes at the default 1 s).
pub const HISTORY: usize = 120;

/// One device's panel state.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceState {
    pub device: DeviceId,
    /// The rank the device belongs to, in a multi-process run (`None`: this process alone).
    pub rank: Option<usize>,
    /// That rank's host.
    pub host: Option<String>,
    /// The replicas running on this device.
    pub replicas: Vec<usize>,
    pub latest: Option<DeviceSample>,
    /// Utilization history in percent (for the sparkline).
    pub util_history: VecDeque<u64>,
    /// Memory use history in percent of the total.
    pub mem_history: VecDeque<u64>,
    /// Per replica on this device: (replica, seconds per step of data + forward/backward, the
    /// share of the step it waits for the slowest replica before the allreduce can start).
    pub replica_step: Vec<(usize, f64, f64)>,
    /// This device's replicas that are stragglers in the latest window (see
    /// `record::straggler`).
    pub slow: Vec<usize>,
    /// Share of the step spent in the allreduce, 0..1.
    pub allreduce_share: Option<f64>,
    /// NVLink traffic since the previous reading, bytes per second (sent, received).
    pub nvlink_rate: Option<(f64, f64)>,
    /// The last NVLink counters and when they were read.
    nvlink_last: Option<(u64, u64, std::time::Instant)>,
    /// Other processes already said to be on this GPU.
    others_seen: Vec<u32>,
}

fn push(history: &mut VecDeque<u64>, value: u64) {
    if history.len() == HISTORY {
        history.pop_front();
    }
    history.push_back(value);
}

/// The panels for `devices` (one per distinct device, in order of first use).
pub fn panels(devices: &[DeviceId]) -> Vec<DeviceState> {
    rank_panels(devices, None, None, 0)
}

/// The panels of one rank's `devices`, whose replicas are numbered from `first_replica`.
pub fn rank_panels(
    devices: &[DeviceId],
    rank: Option<usize>,
    host: Option<&str>,
    first_replica: usize,
) -> Vec<DeviceState> {
    let mut out: Vec<DeviceState> = Vec::new();
    for (i, &device) in devices.iter().enumerate() {
        let replica = first_replica + i;
        match out.iter_mut().find(|d| d.device == device) {
            Some(d) => d.replicas.push(replica),
            None => out.push(DeviceState {
                device,
                rank,
                host: host.map(str::to_owned),
                replicas: vec![replica],
                latest: None,
                util_history: VecDeque::new(),
                mem_history: VecDeque::new(),
                replica_step: Vec::new(),
                slow: Vec::new(),
                allreduce_share: None,
                nvlink_rate: None,
                nvlink_last: None,
                others_seen: Vec::new(),
            }),
        }
    }
    out
}

impl DeviceState {
    /// Takes a reading; returns a warning for each process of someone else's that newly holds
    /// memory on this GPU.
    pub fn on_sample(&mut self, s: &DeviceSample) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(g) = &s.gpu {
            if let (Some(tx), Some(rx)) = (g.nvlink_tx_kib, g.nvlink_rx_kib) {
                let now = std::time::Instant::now();
                if let Some((ptx, prx, at)) = self.nvlink_last {
                    let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                    let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 * 1024.0 / secs;
                    self.nvlink_rate = Some((rate(tx, ptx), rate(rx, prx)));
                }
                self.nvlink_last = Some((tx, rx, now));
            }
            for p in g.others() {
                if p.mem.is_some_and(|m| m > 0) && !self.others_seen.contains(&p.pid) {
                    self.others_seen.push(p.pid);
                    warnings.push(format!(
                        "another process is on {}: pid {} ({}) holds {} GiB",
                        self.device,
                        p.pid,
                        p.name.as_deref().unwrap_or("unknown"),
                        super::view::gib(p.mem.unwrap_or(0))
                    ));
                }
            }
        }
        self.take_sample(s);
        warnings
    }

    fn take_sample(&mut self, s: &DeviceSample) {
        if let Some(u) = s.util_pct {
            push(&mut self.util_history, u.round().max(0.0) as u64);
        }
        if let Some(pct) =
            s.mem_used.zip(s.mem_total).and_then(|(used, total)| used.saturating_mul(100).checked_div(total))
        {
            push(&mut self.mem_history, pct);
        }
        self.latest = Some(s.clone());
    }

    pub fn on_step(&mut self, s: &StepStats) {
        if s.timed_steps == Some(0) {
            // A window of warm-up steps carries no timings.
            return;
        }
        let all: Vec<f64> = s.replicas.iter().map(|t| t.data + t.compute).collect();
        // Every replica's step ends when the slowest's does: the rest of it is waiting.
        let slowest = all.iter().copied().fold(0.0, f64::max);
        let step = (slowest + s.timing.allreduce + s.timing.update).max(1e-12);
        self.replica_step = self
            .replicas
            .iter()
            .filter_map(|&r| all.get(r).map(|&own| (r, own, (slowest - own) / step)))
            .collect();
        // Slow in its own forward and backward pass: a replica fed last by a shared loader
        // waits longer for data without being slow itself.
        let compute: Vec<f64> = s.replicas.iter().map(|t| t.compute).collect();
        self.slow = stragglers(&compute).into_iter().filter(|r| self.replicas.contains(r)).collect();
        let total = s.timing.total();
        self.allreduce_share = (total > 0.0).then(|| s.timing.allreduce / total);
    }

    /// Whether a sample belongs to this panel (a sample without a rank is rank 0's own).
    pub fn takes(&self, s: &DeviceSample) -> bool {
        self.device == s.device && self.rank.unwrap_or(0) == s.rank.unwrap_or(0)
    }

    /// Whether the figures are this process's rather than the device's own.
    pub fn is_process_fallback(&self) -> bool {
        self.latest.as_ref().is_some_and(|s| s.source == SampleSource::Process)
    }
}
