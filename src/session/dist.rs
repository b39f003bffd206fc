//! A multi-process run from this process's side: where it stands (torchrun, Slurm or flags),
//! its devices, and joining the other ranks. The settings every rank must share are compared at
//! the rendezvous, so a rank started with other flags stops the run at once with a clear error.

use std::time::Duration;

use anyhow::anyhow;

use super::input;
use crate::cli::Args;
use crate::Failure;
use dpt_core::device::DeviceId;
use dpt_tui::device::{resolve_devices, resolve_devices_for_rank, Machine};
use dpt_tui::dist::launch::{self, Launch, LaunchFlags};
use dpt_tui::dist::{DistError, World};
use dpt_tui::settings::{DistBackend, Settings};

/// This process's launch, or `None` when it runs alone.
pub fn launch(args: &Args) -> Result<Option<Launch>, Failure> {
    let flags = LaunchFlags {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master_addr: args.master_addr.clone(),
        master_port: args.master_port,
    };
    launch::resolve(&|k| std::env::var(k).ok(), &flags).map_err(input)
}

/// The devices of this process's replicas.
pub fn devices(
    asked: &Settings,
    machine: Machine,
    launch: Option<&Launch>,
) -> Result<Vec<DeviceId>, Failure> {
    let devices = &asked.placement.devices;
    match launch {
        Some(l) => resolve_devices_for_rank(devices, machine, l.local_rank, l.local_world_size),
        None => resolve_devices(devices, machine),
    }
    .map_err(input)
}

/// A failure of the world: bad input (exit 2) at the start, a failure (exit 1) later.
pub fn failure(e: DistError) -> Failure {
    if e.is_input() {
        Failure::Input(e.into())
    } else {
        Failure::Run(e.into())
    }
}

/// What every rank must agree on: the settings the command asks for (its file and flags) less
/// each rank's own (`settings::agreement`), with this build's version, the world's size and
/// whether it resumes.
fn agreement(args: &Args, asked: &Settings, world_size: usize) -> serde_json::Value {
    let mut all = dpt_tui::settings::agreement::shared(asked);
    all.insert("version".into(), env!("CARGO_PKG_VERSION").into());
    all.insert("world_size".into(), world_size.into());
    all.insert("resume".into(), args.resume.is_some().into());
    serde_json::Value::Object(all)
}

/// Joins the other ranks.
pub fn join(args: &Args, asked: &Settings, launch: &Launch, devices: &[DeviceId]) -> Result<World, Failure> {
    let gpus = devices.iter().all(|d| matches!(d, DeviceId::Cuda(_)));
    let backend = asked.placement.dist_backend;
    if backend == DistBackend::Nccl && !gpus {
        return Err(input(anyhow!(
            "--dist-backend nccl needs GPU devices, and this rank has {}; use --dist-backend gloo",
            devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
        )));
    }
    // The backend is chosen at the rendezvous, from every rank's devices.
    let first_gpu = devices.first().filter(|_| gpus && backend != DistBackend::Gloo);
    if let Some(tch::Device::Cuda(i)) = first_gpu.map(|d| dpt_tui::device::tch_device(*d)) {
        // Before the process group exists, as DDP scripts call torch.cuda.set_device(local_rank):
        // NCCL's set-up and the broadcasts then make no context on another GPU.
        dpt_sys::c10d::set_thread_device(i)
            .map_err(|e| Failure::Run(anyhow!("cannot use cuda:{i}: {}", e.0)))?;
    }
    let timeout = Duration::from_secs_f64(asked.placement.dist_timeout);
    World::join(launch, backend, devices, agreement(args, asked, launch.world_size), timeout).map_err(failure)
}
