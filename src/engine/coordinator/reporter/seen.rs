//! What the reporter learns once in a run: the model's FLOPs (from the first replica that
//! counts them) and the replicas already named as stragglers.

use crate::flops::{ModelFlops, PeakFlops};

/// A replica whose forward and backward pass ran slower than the others' (see
/// `record::straggler`), named once per run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::engine::coordinator) struct Straggler {
    pub(in crate::engine::coordinator) replica: usize,
    pub(in crate::engine::coordinator) step_ms: f64,
    pub(in crate::engine::coordinator) median_ms: f64,
}

/// The model's FLOPs and what the run's GPUs can do at most, for the rates a record gives.
pub(super) struct Rates {
    /// The model's FLOPs, once a replica has counted them.
    flops: Option<ModelFlops>,
    /// What the run's GPUs can do at most in its precision (unknown GPUs, the CPU: none).
    pub(super) peak: Option<PeakFlops>,
}

impl Rates {
    pub(super) fn new(peak: Option<PeakFlops>) -> Rates {
        Rates { flops: None, peak }
    }

    /// A replica's count of the forward pass's FLOPs per sample (the first one counts).
    pub(super) fn counted(&mut self, forward_per_sample: Option<f64>) {
        if let (None, Some(f)) = (self.flops, forward_per_sample) {
            self.flops = Some(ModelFlops { forward_per_sample: f });
        }
    }

    pub(super) fn forward_per_sample(&self) -> Option<f64> {
        self.flops.map(|f| f.forward_per_sample)
    }

    /// The model FLOP/s a throughput of `samples_per_sec` achieves and its share of the peak,
    /// once the FLOPs are counted.
    pub(super) fn model_flops(&self, samples_per_sec: f64) -> (Option<f64>, Option<f64>) {
        let Some(f) = self.flops else { return (None, None) };
        (Some(f.achieved(samples_per_sec)), self.peak.as_ref().and_then(|p| f.utilisation(samples_per_sec, p)))
    }
}

/// The replicas already named as stragglers: each is named once per run.
#[derive(Default)]
pub(super) struct Stragglers {
    named: Vec<bool>,
}

impl Stragglers {
    /// The replicas slower than the others in a report's compute `times` that were not named
    /// before; a longer wait for its batch is the loader's, not the replica's.
    pub(super) fn new_ones(&mut self, times: &[f64]) -> Vec<Straggler> {
        let Some(median) = crate::record::straggler::median(times) else { return Vec::new() };
        if self.named.len() < times.len() {
            self.named.resize(times.len(), false);
        }
        crate::record::straggler::stragglers(times)
            .into_iter()
            .filter(|&r| !std::mem::replace(&mut self.named[r], true))
            .map(|replica| Straggler { replica, step_ms: times[replica] * 1e3, median_ms: median * 1e3 })
            .collect()
    }
}
