//! What the update touches: the replicas' tensors with their optimizer state, the dynamic loss
//! scaler's state, and the replica being touched now (named if touching it fails). A step's
//! update is GradScaler's check of the reduced gradient, then clipping and the optimizer's
//! update of every replica at the step's lr.

use tch::Tensor;

use super::Replicas;
use crate::device::gpu_wait::WaitError;
use crate::engine::optim::loss_scale::LossScaler;

pub(super) struct Update {
    pub(super) replicas: Replicas,
    /// Dynamic loss scaling's state (`precision.loss_scale`).
    pub(super) scaler: Option<LossScaler>,
    /// The replica whose tensors this thread is touching now, to name it if that fails.
    pub(super) touching: Option<usize>,
}

impl Update {
    /// GradScaler's step: unscales the reduced gradient of a `batch`-sample step and checks
    /// it (reading the check to the host once `fence` has waited for it, within its deadline),
    /// then moves the scale. Whether the step is clean (without scaling, always): an overflowed
    /// one leaves the weights and the optimizer state as they are.
    pub(super) fn unscale(
        &mut self,
        holders: &[usize],
        batch: usize,
        fence: impl FnOnce(tch::Device) -> Result<(), WaitError>,
    ) -> Result<bool, WaitError> {
        let Some(scaler) = self.scaler else { return Ok(true) };
        let clean = match self.replicas.unscale(holders, &scaler, batch) {
            Some(found_inf) => {
                fence(found_inf.device())?;
                LossScaler::finite(&found_inf)
            }
            None => true,
        };
        if let Some(s) = &mut self.scaler {
            s.update(clean);
        }
        Ok(clean)
    }

    /// Clips the reduced gradient to `clip` and updates every replica from it at `lr`; returns
    /// the mean gradient's norm before clipping (on the device). `fault` is a test's injected
    /// panic at (replica, step).
    pub(super) fn apply(
        &mut self,
        holders: &[usize],
        (batch, lr, global_step): (usize, f64, usize),
        clip: Option<f64>,
        fault: Option<(usize, usize)>,
    ) -> Tensor {
        let norm = self.replicas.grad_norm(holders, batch, clip);
        // The optimizer counts the steps it took (Adam's bias correction), not skipped ones.
        let taken = (global_step + 1) as u64 - self.scaler.map_or(0, |s| s.skipped);
        for (i, &holder) in holders.iter().enumerate() {
            self.touching = Some(i);
            if fault == Some((i, global_step)) {
                panic!("injected fault: the coordinator fails updating replica {i} at step {global_step}");
            }
            self.replicas.update(i, holder, (lr, batch, taken), holders[..i].contains(&holder));
        }
        self.touching = None;
        norm
    }
}
