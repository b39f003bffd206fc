//! What the update touches: the replicas' tensors with their optimizer state, the dynamic loss
//! scaler's state on the device, and the replica being touched now (named if touching it
//! fails). A step's update is GradScaler's check of the reduced gradient, then clipping and the
//! optimizer's update of every replica at the step's lr; an overflowed step is skipped by the
//! fused kernels themselves (they read the check on the device), so no step reads the host.

use tch::Tensor;

use super::Replicas;
use crate::engine::optim::loss_scale::{DeviceScaler, LossScaler};

pub(super) struct Update {
    pub(super) replicas: Replicas,
    /// Dynamic loss scaling's state (`precision.loss_scale`), on the first replica's device.
    pub(super) scaler: Option<DeviceScaler>,
    /// The skipped steps already reported (the scaler's count at the last report window).
    skipped_reported: u64,
    /// The replica whose tensors this thread is touching now, to name it if that fails.
    pub(super) touching: Option<usize>,
}

impl Update {
    pub(super) fn new(replicas: Replicas) -> Update {
        Update { replicas, scaler: None, skipped_reported: 0, touching: None }
    }

    /// Starts (or, after a resume or a rewind, continues) the run at `global_step` steps done,
    /// with the loss scaler `host` (when the run scales its loss): the scaler on the first
    /// replica's device, and every replica's count of steps taken (those done, less the
    /// skipped ones).
    pub(super) fn start(&mut self, host: Option<LossScaler>, global_step: usize) {
        let device = self.replicas.params.first().map_or(tch::Device::Cpu, Tensor::device);
        let skipped = host.map_or(0, |s| s.skipped);
        self.scaler = host.map(|h| DeviceScaler::new(h, device));
        self.skipped_reported = skipped;
        self.replicas.set_steps((global_step as u64).saturating_sub(skipped));
    }

    /// The scaler's state on the host, for a checkpoint or a rewind point (reads the device).
    pub(super) fn scaler_state(&self) -> Option<LossScaler> {
        self.scaler.as_ref().map(DeviceScaler::host)
    }

    /// The steps skipped since the last call (reads the device; none without scaling).
    pub(super) fn newly_skipped(&mut self) -> usize {
        let Some(s) = &self.scaler else { return 0 };
        let now = s.skipped();
        usize::try_from(now.saturating_sub(std::mem::replace(&mut self.skipped_reported, now))).unwrap_or(0)
    }

    /// GradScaler's unscale and check of the reduced gradient of a `batch`-sample step, on the
    /// device (nothing without scaling).
    pub(super) fn unscale(&mut self, holders: &[usize], batch: usize) {
        if let Some(scaler) = &mut self.scaler {
            scaler.begin_step();
            self.replicas.unscale(holders, scaler, batch);
        }
    }

    /// Clips the reduced gradient to `clip` and updates every replica from it at `lr` (an
    /// overflowed step changes nothing); moves the loss scale. Returns the mean gradient's norm
    /// before clipping (on the device; 0 for an overflowed step, which the report leaves out).
    /// `fault` is a test's injected panic at (replica, step).
    pub(super) fn apply(
        &mut self,
        holders: &[usize],
        (batch, lr, global_step): (usize, f64, usize),
        clip: Option<f64>,
        fault: Option<(usize, usize)>,
    ) -> Tensor {
        let mut norm = self.replicas.grad_norm(holders, batch, clip);
        for (i, &holder) in holders.iter().enumerate() {
            self.touching = Some(i);
            if fault == Some((i, global_step)) {
                panic!("injected fault: the coordinator fails updating replica {i} at step {global_step}");
            }
            let device = self.replicas.params[i].device();
            let found_inf = self.scaler.as_ref().map(|s| s.found_inf_on(device));
            self.replicas.update(i, holder, (lr, batch), holders[..i].contains(&holder), found_inf.as_ref());
        }
        self.touching = None;
        if let Some(s) = &mut self.scaler {
            let clean = s.clean().to_device(norm.device());
            norm = norm.where_self(&clean, &norm.zeros_like());
            s.end_step();
        }
        norm
    }
}
