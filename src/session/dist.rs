//! A multi-process run from this process's side: where it stands (torchrun, Slurm or flags),
//! its devices, and joining the other ranks. The settings every rank must share are compared at
//! the rendezvous, so a rank started with other flags stops the run at once with a clear error.

use std::time::Duration;

use anyhow::anyhow;

use super::input;
use crate::cli::{Args, DistBackend};
use crate::Failure;
use dpt_tui::dist::c10d::Backend;
use dpt_tui::dist::launch::{self, Launch, LaunchFlags};
use dpt_tui::dist::{DistError, World};
use dpt_tui::engine::device::{resolve_devices, resolve_devices_for_rank, Machine};
use dpt_tui::engine::DeviceId;

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
pub fn devices(args: &Args, machine: Machine, launch: Option<&Launch>) -> Result<Vec<DeviceId>, Failure> {
    match launch {
        Some(l) => resolve_devices_for_rank(&args.devices, machine, l.local_rank, l.local_world_size),
        None => resolve_devices(&args.devices, machine),
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

/// What every rank must agree on: the training flags (not the per-rank ones such as the
/// devices, the run directory or the data's path) and this build's version.
fn settings(args: &Args, world_size: usize) -> serde_json::Value {
    let mut all = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "world_size": world_size,
        "model": args.model.as_ref().map(|m| m.name()),
        "loss": args.loss.map(|l| format!("{:?}", l.0)),
        "normalize": args.normalize,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "lr": args.lr,
        "optimizer": args.optimizer.map(|o| o.name()),
        "momentum": args.momentum,
        "nesterov": args.nesterov,
        "weight_decay": args.weight_decay,
        "betas": args.betas,
        "eps": args.eps,
        "decay_all": args.decay_all,
        "lr_schedule": args.lr_schedule.as_ref().map(ToString::to_string),
        "warmup_steps": args.warmup_steps,
        "min_lr": args.min_lr,
        "lr_gamma": args.lr_gamma,
        "lr_batch_ref": args.lr_batch_ref,
        "clip_grad_norm": args.clip_grad_norm,
        "label_smoothing": args.label_smoothing,
        "accumulate": args.accumulate,
        "ema": args.ema,
        "init_from": args.init_from.is_some(),
        "val_fraction": args.val_fraction,
        "keep_best": args.choice.keep_best,
        "best_metric": args.choice.best_metric.map(|m| m.name()),
        "early_stop": args.choice.early_stop,
        // The buckets decide the collectives each rank starts.
        "bucket_cap_mb": args.bucket_cap_mb,
        "seed": args.seed,
        "train_limit": args.train_limit,
        "test_limit": args.test_limit,
        "max_steps": args.max_steps,
        "log_every": args.log_every,
        "precision": args.precision.name(),
        "loss_scale": args.scaling.loss_scale.map(|v| format!("{v:?}")),
        "loss_scale_init": args.scaling.loss_scale_init,
        "loss_scale_interval": args.scaling.loss_scale_interval,
        "channels_last": args.channels_last.map(|c| format!("{c:?}")),
        "resume": args.resume.is_some(),
    });
    // The augmentation's and the images' flags (one macro call cannot hold them all).
    all["augment"] = serde_json::json!(args.augmentation.augment.map(|a| format!("{a:?}")));
    all["crop_padding"] = serde_json::json!(args.augmentation.crop_padding);
    all["hflip"] = serde_json::json!(args.augmentation.hflip.map(|v| format!("{v:?}")));
    all["max_bad_images"] = serde_json::json!(args.max_bad_images);
    all
}

/// Joins the other ranks.
pub fn join(args: &Args, launch: &Launch, devices: &[DeviceId]) -> Result<World, Failure> {
    if !(args.dist_timeout.is_finite() && args.dist_timeout > 0.0) {
        return Err(input(anyhow!("--dist-timeout must be a positive number of seconds")));
    }
    let gpus = devices.iter().all(|d| matches!(d, DeviceId::Cuda(_)));
    let backend = match args.dist_backend {
        DistBackend::Gloo => Backend::Gloo,
        DistBackend::Nccl if !gpus => {
            return Err(input(anyhow!(
                "--dist-backend nccl needs GPU devices, and this rank has {}; use --dist-backend gloo",
                devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
            )))
        }
        DistBackend::Nccl => Backend::Nccl,
        DistBackend::Auto if gpus => Backend::Nccl,
        DistBackend::Auto => Backend::Gloo,
    };
    let device = match (backend, devices.first()) {
        (Backend::Nccl, Some(d)) => d.to_tch(),
        _ => tch::Device::Cpu,
    };
    if let tch::Device::Cuda(i) = device {
        // Before the process group exists, as DDP scripts call torch.cuda.set_device(local_rank):
        // NCCL's set-up and the broadcasts then make no context on another GPU.
        dpt_tui::dist::c10d::set_thread_device(i)
            .map_err(|e| Failure::Run(anyhow!("cannot use cuda:{i}: {}", e.0)))?;
    }
    let timeout = Duration::from_secs_f64(args.dist_timeout);
    World::join(launch, backend, device, devices, settings(args, launch.world_size), timeout).map_err(failure)
}
