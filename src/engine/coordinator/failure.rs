//! The coordinator's side of failures: its thread's device made current before any GPU work,
//! a panic of its own named by the replica and device it touched, running out of GPU memory
//! said in one line with the way out, and the record of a failed run.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::config::TrainConfig;
use crate::engine::{clock, EngineError};
use crate::record::Change;
use dpt_core::device::DeviceId;

/// How long the failure path waits for each GPU's queued work when it looks for the one that
/// failed: a hung GPU counts as the failed one after it.
const FAILED_GPU_WAIT: Duration = Duration::from_secs(10);

/// The record of a run that failed with `e`, naming the replica and device where known.
pub(super) fn failed(cfg: &TrainConfig, e: &EngineError) -> Change {
    let (replica, device) = match e {
        EngineError::Worker { replica, device, .. } => (Some(*replica), Some(device.clone())),
        EngineError::Coordinator { replica, device, .. } => (*replica, device.clone()),
        EngineError::Stalled { replicas, .. } => {
            (replicas.first().copied(), replicas.first().map(|&r| cfg.devices[r].to_string()))
        }
        _ => (None, None),
    };
    Change::Failed { replica, device, message: crate::error_chain(e) }
}

/// An out-of-memory failure said in one line with the way out (`checkpoint`: the run's last on
/// disk; `replicas`: in the whole run); other errors unchanged.
pub(super) fn explain_oom(
    cfg: &TrainConfig,
    e: EngineError,
    checkpoint: Option<PathBuf>,
    replicas: usize,
) -> EngineError {
    let (replica, device, message) = match &e {
        EngineError::Worker { replica, device, error } => {
            (Some(*replica), Some(device.clone()), error.to_string())
        }
        EngineError::Coordinator { replica, device, message } => (*replica, device.clone(), message.clone()),
        EngineError::Nccl(message) => (None, None, message.clone()),
        _ => return e,
    };
    let Some(report) = crate::device::oom::parse(&message) else { return e };
    let device = device.or_else(|| replica.and_then(|r| cfg.devices.get(r)).map(ToString::to_string));
    let device = device.unwrap_or_else(|| "a GPU".to_owned());
    let on_device = cfg.devices.iter().filter(|d| d.to_string() == device).count().max(1);
    let ampere = |i: usize| dpt_sys::c10d::cuda_identity(i).is_ok_and(|id| id.major >= 8);
    let gpu = cfg.devices.iter().find_map(|d| match d {
        DeviceId::Cuda(i) if d.to_string() == device => Some(*i),
        _ => None,
    });
    // Built-in models only: a TorchScript model casts inside itself.
    let half = gpu
        .filter(|_| cfg.settings.precision.format == crate::model::Precision::F32 && cfg.kit.script.is_none())
        .map(|i| if ampere(i) { "bf16" } else { "f16" });
    let context = crate::device::oom::OomContext {
        device: &device,
        replica,
        per_replica: cfg.settings.replica_batch(replicas),
        on_device,
        checkpoint: checkpoint.map(|p| p.display().to_string()),
        half,
    };
    EngineError::OutOfMemory(crate::device::oom::explain(&report, &context))
}

/// Makes the first GPU of the run this thread's device before it touches any (the timing
/// events, NCCL and the update run there), as DDP scripts call `torch.cuda.set_device`; and
/// on each GPU of the run, a stream of the coordinator's own current for this thread until the
/// guards returned are dropped (its sums and updates are ordered against the replicas' streams
/// by `engine::handoff`).
pub(super) fn enter_devices(cfg: &TrainConfig) -> Result<Vec<dpt_sys::c10d::OwnStream>, EngineError> {
    let mut gpus = cfg.devices.iter().enumerate().filter_map(|(r, d)| match d {
        DeviceId::Cuda(i) => Some((r, *i)),
        DeviceId::Cpu => None,
    });
    let failed = |replica: usize, i: usize| {
        move |e: dpt_sys::c10d::C10dError| EngineError::Coordinator {
            replica: Some(replica),
            device: Some(format!("cuda:{i}")),
            message: e.0,
        }
    };
    let mut streams = Vec::new();
    if let Some((replica, i)) = gpus.next() {
        dpt_sys::c10d::set_thread_device(i).map_err(failed(replica, i))?;
        streams.push((i, dpt_sys::c10d::OwnStream::enter(i).map_err(failed(replica, i))?));
    }
    for (replica, i) in gpus {
        if !streams.iter().any(|(d, _)| *d == i) {
            streams.push((i, dpt_sys::c10d::OwnStream::enter(i).map_err(failed(replica, i))?));
        }
    }
    Ok(streams.into_iter().map(|(_, s)| s).collect())
}

/// The failure a panic of this thread stands for, with the replica it was working on
/// (`touching`; or, failing that, the first CUDA device that reports an error or does not
/// finish its queued work within [`FAILED_GPU_WAIT`]: a fence polled with a deadline, not a
/// synchronize that would hang the failure path on a hung GPU).
pub(super) fn panic_error(
    cfg: &TrainConfig,
    touching: Option<usize>,
    panic: &(dyn std::any::Any + Send),
) -> EngineError {
    let message = crate::engine::worker::panic_message(panic);
    let wait = cfg.step_timeout().min(FAILED_GPU_WAIT);
    let replica = touching.or_else(|| {
        cfg.devices.iter().position(|d| match d {
            DeviceId::Cuda(i) => {
                clock::waiting("finding the failed GPU", d, wait).fence(tch::Device::Cuda(*i)).is_err()
            }
            DeviceId::Cpu => false,
        })
    });
    let device = replica.and_then(|r| cfg.devices.get(r)).map(ToString::to_string);
    EngineError::Coordinator { replica, device, message }
}
