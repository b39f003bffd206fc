//! Test-only fault injection, to prove that failures are caught, reported and survived. The
//! binary reads it from `DPT_INJECT_FAULT`; nothing is injected unless it is set.
//!
//! Syntax: comma-separated `worker-panic=R@S` (replica R panics at global step S),
//! `worker-stall=R@S` (replica R stops answering at step S), `coordinator-panic=R@S` (the
//! coordinator panics while updating replica R at step S), `nan-loss=S` (every replica's loss
//! becomes NaN from step S on), `checkpoint-write` (every checkpoint write fails),
//! `slow-replica=R@MS` (replica R takes MS milliseconds longer over every step, as a throttled
//! or shared device would), `worker-oom=R@S` (replica R fails at step S with the text of
//! PyTorch's CUDA allocator running out of memory), `grad-overflow=R@S` (replica R's scaled
//! loss becomes infinite at step S, as an fp16 overflow would make it; repeatable),
//! `setup-hang` (the communicator set-up before step 0 never returns, as NCCL's peer-to-peer
//! set-up on a machine with PCIe ACS on; on any device), `late-report` (every report window
//! is read and recorded a window later, as on a GPU, on any device), `graph-stand-in` (the
//! replicas take the CUDA-graph path on any device, with a stand-in for the graph that runs the
//! captured work each time it is replayed: the graph-ready step, eagerly), `graph-capture-fails=R`
//! (replica R's capture fails, with `graph-stand-in`).

use std::str::FromStr;

/// Faults to inject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    pub worker_panic: Option<(usize, usize)>,
    pub worker_stall: Option<(usize, usize)>,
    /// The coordinator panics while updating replica R at step S (as a CUDA fault would).
    pub coordinator_panic: Option<(usize, usize)>,
    pub nan_loss_from: Option<usize>,
    pub checkpoint_write: bool,
    /// Replica R spends this many more milliseconds on every step.
    pub slow_replica: Option<(usize, usize)>,
    /// Replica R runs out of GPU memory at step S.
    pub worker_oom: Option<(usize, usize)>,
    /// Replica R's gradient overflows at step S, for each listed pair.
    pub grad_overflow: Vec<(usize, usize)>,
    /// The communicator set-up never returns.
    pub setup_hang: bool,
    /// Report windows are read a window later on any device (a GPU run's rule).
    pub late_report: bool,
    /// The replicas graph their steps on any device, through a stand-in that runs the work.
    pub graph_stand_in: bool,
    /// Replica R's capture fails.
    pub graph_capture_fails: Option<usize>,
}

impl Faults {
    /// Whether a fault changes what a step computes (a graph would not replay it).
    pub fn change_steps(&self) -> bool {
        self.nan_loss_from.is_some() || !self.grad_overflow.is_empty() || self.slow_replica.is_some()
    }
}

fn replica_at(v: &str) -> Result<(usize, usize), String> {
    let (r, s) = v.split_once('@').ok_or_else(|| format!("'{v}' is not R@STEP"))?;
    Ok((
        r.parse().map_err(|_| format!("bad replica '{r}'"))?,
        s.parse().map_err(|_| format!("bad step '{s}'"))?,
    ))
}

impl FromStr for Faults {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut f = Faults::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                Some(("worker-panic", v)) => f.worker_panic = Some(replica_at(v)?),
                Some(("worker-stall", v)) => f.worker_stall = Some(replica_at(v)?),
                Some(("coordinator-panic", v)) => f.coordinator_panic = Some(replica_at(v)?),
                Some(("slow-replica", v)) => f.slow_replica = Some(replica_at(v)?),
                Some(("worker-oom", v)) => f.worker_oom = Some(replica_at(v)?),
                Some(("grad-overflow", v)) => f.grad_overflow.push(replica_at(v)?),
                Some(("nan-loss", v)) => {
                    f.nan_loss_from = Some(v.parse().map_err(|_| format!("bad step '{v}'"))?)
                }
                None if item == "checkpoint-write" => f.checkpoint_write = true,
                None if item == "setup-hang" => f.setup_hang = true,
                None if item == "late-report" => f.late_report = true,
                None if item == "graph-stand-in" => f.graph_stand_in = true,
                Some(("graph-capture-fails", v)) => {
                    f.graph_capture_fails = Some(v.parse().map_err(|_| format!("bad replica '{v}'"))?)
                }
                _ => return Err(format!("unknown fault '{item}'")),
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::Faults;

    #[test]
    fn parses() {
        let f: Faults = "worker-panic=1@3, nan-loss=7,checkpoint-write".parse().unwrap();
        assert_eq!(f.worker_panic, Some((1, 3)));
        assert_eq!(f.nan_loss_from, Some(7));
        assert!(f.checkpoint_write && f.worker_stall.is_none());
        let f: Faults = "grad-overflow=0@1,grad-overflow=1@4".parse().unwrap();
        assert_eq!(f.grad_overflow, [(0, 1), (1, 4)]);
        assert!("late-report".parse::<Faults>().unwrap().late_report);
        let f: Faults = "graph-stand-in,graph-capture-fails=1".parse().unwrap();
        assert!(f.graph_stand_in && f.graph_capture_fails == Some(1) && !f.change_steps());
        assert!("nan-loss=3".parse::<Faults>().unwrap().change_steps());
        assert!("worker-panic=1".parse::<Faults>().is_err());
        assert!("meteor".parse::<Faults>().is_err());
    }
}
