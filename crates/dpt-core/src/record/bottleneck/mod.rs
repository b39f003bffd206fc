//! Why a run is slow, in one line: what limits its step and the one change most likely to help,
//! decided from what was measured (the step split, the loader, the replicas' times, every
//! device's latest reading). The rules are the table in [`rules`]; this module holds what they
//! decide on ([`Evidence`]) and what they decide ([`Bottleneck`]).

mod diagnosis;
mod rules;
mod run;

use serde::{Deserialize, Serialize};

use super::{RunInfo, StepStats};
use crate::device::DeviceId;
use crate::monitor::{DeviceSample, SampleSource};

pub use diagnosis::{Account, Diagnosis};
pub use rules::{Rule, RULES};
pub use run::RunSplit;

/// NCCL's allreduce bus bandwidth `dpt-tui doctor` measured across the run's GPUs (the same
/// set, by UUID): what the communication verdict compares the run's own allreduce with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MeasuredBus {
    /// Bus bandwidth in GB/s (NCCL's tests' definition: `2(n-1)/n × bytes / time`).
    pub gbs: f64,
    /// When doctor measured it (seconds since 1970).
    pub unix: f64,
}

/// The bus bandwidth an allreduce of `bytes` over `n` GPUs in `seconds` reaches, GB/s.
pub fn bus_gbs(bytes: f64, n: usize, seconds: f64) -> f64 {
    let n = n.max(1) as f64;
    2.0 * (n - 1.0) / n * bytes / seconds.max(f64::MIN_POSITIVE) / 1e9
}

/// What limits the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The replicas wait for their batches.
    Input,
    /// Forward and backward passes: the devices are the limit (the good case).
    Compute,
    /// Summing the gradients over the replicas and processes.
    Communication,
    /// One replica or rank is slower than the others, who wait for it.
    Straggler,
    /// GPU clocks are held down (heat, power brake, hardware slowdown).
    Throttled,
    /// Device memory is nearly full.
    Memory,
    /// The host side: the coordinator's update, or kernels launched too slowly to keep a GPU
    /// busy.
    Host,
}

impl Cause {
    /// The verdict's first words.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Input => "input-bound",
            Cause::Compute => "compute-bound",
            Cause::Communication => "communication-bound",
            Cause::Straggler => "straggler",
            Cause::Throttled => "throttled",
            Cause::Memory => "memory",
            Cause::Host => "host-bound",
        }
    }
}

/// The verdict on a report window or a whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bottleneck {
    pub cause: Cause,
    /// How much of the step the cause takes (0 to 1); for `memory`, the share of the device's
    /// memory in use.
    pub share: f64,
    /// What was measured, in words (`replicas wait for data 41% of the step (…)`).
    pub finding: String,
    /// The one change most likely to help.
    pub advice: String,
}

impl Bottleneck {
    /// `input-bound: replicas wait for data 41% of the step (…): raise --decode-threads`.
    pub fn line(&self) -> String {
        format!("{}: {}: {}", self.cause.label(), self.finding, self.advice)
    }
}

/// What the rules decide on: the run's facts, a report window's (or the run's) step figures
/// and the latest reading of each device (every rank's, on rank 0).
pub struct Evidence<'a> {
    pub info: &'a RunInfo,
    pub step: &'a StepStats,
    pub devices: &'a [DeviceSample],
}

/// The verdict on `evidence`, or `None` when its steps were not timed (warm-up).
pub fn verdict(evidence: &Evidence) -> Option<Bottleneck> {
    if evidence.step.timed_steps == Some(0) || evidence.total() <= 0.0 {
        return None;
    }
    let mut best: Option<(u8, Bottleneck)> = None;
    for rule in RULES {
        if best.as_ref().is_some_and(|(tier, _)| *tier < rule.tier) {
            break;
        }
        if let Some(found) = (rule.find)(evidence) {
            let b = Bottleneck {
                cause: rule.cause,
                share: found.share,
                finding: found.finding,
                advice: found.advice,
            };
            if best.as_ref().is_none_or(|(_, held)| b.share > held.share) {
                best = Some((rule.tier, b));
            }
        }
    }
    best.map(|(_, b)| b)
}

/// What a rule found: the share it takes, in words, and the change to make.
pub struct Finding {
    pub share: f64,
    pub finding: String,
    pub advice: String,
}

/// One process's place in the run, for naming replicas and finding their devices' readings.
struct Slot {
    rank: usize,
    device: DeviceId,
}

impl Evidence<'_> {
    /// Seconds of a timed step.
    pub fn total(&self) -> f64 {
        self.step.timing.total()
    }

    /// `seconds` as a share of the step.
    pub fn share(&self, seconds: f64) -> f64 {
        seconds / self.total().max(1e-12)
    }

    /// Processes in the run.
    pub fn ranks(&self) -> usize {
        self.info.world.as_ref().map_or(1, |w| w.replicas.len())
    }

    /// Global replica `i`'s rank and device.
    fn slot(&self, i: usize) -> Option<Slot> {
        match &self.info.world {
            Some(w) => w
                .devices
                .iter()
                .enumerate()
                .flat_map(|(rank, ds)| ds.iter().map(move |&device| Slot { rank, device }))
                .nth(i),
            None => self.info.devices.get(i).map(|&device| Slot { rank: 0, device }),
        }
    }

    /// Global replica `i` as people name it: its device (`cuda:3`), with its place among
    /// several CPU replicas (`replica 1 (cpu)`) or its rank (`rank 1 cuda:0`).
    pub fn replica_name(&self, i: usize) -> String {
        match self.slot(i) {
            Some(s) if self.ranks() > 1 => format!("rank {} {}", s.rank, s.device),
            Some(Slot { device: DeviceId::Cpu, .. }) => format!("replica {i} (cpu)"),
            Some(s) => s.device.to_string(),
            None => format!("replica {i}"),
        }
    }

    /// Rank `r` with its host (`rank 1 (host b7)`).
    pub fn rank_name(&self, r: usize) -> String {
        match self.info.world.as_ref().and_then(|w| w.hosts.get(r)) {
            Some(host) => format!("rank {r} (host {host})"),
            None => format!("rank {r}"),
        }
    }

    /// The latest reading of global replica `i`'s device.
    pub fn replica_sample(&self, i: usize) -> Option<&DeviceSample> {
        let slot = self.slot(i)?;
        self.devices.iter().find(|s| s.device == slot.device && s.rank.unwrap_or(0) == slot.rank)
    }

    /// Readings NVML gave (GPUs).
    pub fn gpus(&self) -> impl Iterator<Item = &DeviceSample> {
        self.devices.iter().filter(|s| s.source == SampleSource::Nvml)
    }

    /// Whether the replicas train on GPUs.
    pub fn on_gpu(&self) -> bool {
        let cuda = |d: &DeviceId| matches!(d, DeviceId::Cuda(_));
        match &self.info.world {
            Some(w) => w.devices.iter().flatten().any(cuda),
            None => self.info.devices.iter().any(cuda),
        }
    }

    /// Each replica's forward and backward pass, in seconds. Its wait for data is left out:
    /// replicas fed by one loader take their batches in turn, so the last one waits for the
    /// others' batches to be decoded first; that wait is the loader's (the input rule's), not a
    /// slow replica's.
    pub fn replica_compute(&self) -> Vec<f64> {
        self.step.replicas.iter().map(|r| r.compute).collect()
    }

    /// Each rank's forward and backward pass: its slowest replica's. A rank whose own loader
    /// is slow shows in the step's data wait (its slowest over the ranks), for the input rule.
    pub fn rank_compute(&self) -> Vec<f64> {
        let times = self.replica_compute();
        let counts = self.info.world.as_ref().map_or_else(|| vec![times.len()], |w| w.replicas.clone());
        let mut out = Vec::with_capacity(counts.len());
        let mut at = 0;
        for n in counts {
            out.push(times.iter().skip(at).take(n).copied().fold(0.0, f64::max));
            at += n;
        }
        out
    }
}

/// `0.413` → `41%`.
fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

#[cfg(test)]
mod tests;
