//! What the update touches: the replicas' tensors with their optimizer state, the dynamic loss
//! scaler's state, and the replica being touched now (named if touching it fails).

use super::Replicas;

pub(super) struct Update {
    pub(super) replicas: Replicas,
    /// Dynamic loss scaling's state (`precision.loss_scale`).
    pub(super) scaler: Option<crate::engine::optim::loss_scale::LossScaler>,
    /// The replica whose tensors this thread is touching now, to name it if that fails.
    pub(super) touching: Option<usize>,
}
