//! How the replicas' tensors are named and laid out in the flat buffers, and how a snapshot of
//! them holds the tensors: views of the training buffers or host copies.

use tch::Tensor;

use crate::device::landing::{Landing, LandingError};

use crate::engine::flat::Layout;
use crate::model::TensorSpec;
use crate::persist::checkpoint::NamedTensors;

/// Names and layouts of the model's tensors in the flat buffers.
pub struct ModelLayout {
    pub param_specs: Vec<TensorSpec>,
    pub buffer_specs: Vec<TensorSpec>,
    pub params: Layout,
    pub buffers: Layout,
}

impl ModelLayout {
    /// A model of trainable parameters of these `shapes` and no buffers (a unit test's).
    #[cfg(test)]
    pub fn of_params(shapes: &[&[i64]]) -> ModelLayout {
        let specs: Vec<TensorSpec> = shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| TensorSpec {
                name: format!("p{i}"),
                shape: shape.to_vec(),
                init: crate::model::Init::Normal { std: 1.0 },
                frozen: false,
            })
            .collect();
        ModelLayout {
            params: Layout::new(&specs, false),
            buffers: Layout::new(&[], false),
            param_specs: specs,
            buffer_specs: Vec::new(),
        }
    }

    /// `flat` (laid out by `layout`) as named tensors in logical order, held as `held` says.
    pub(super) fn split(
        flat: &Tensor,
        layout: &Layout,
        specs: &[TensorSpec],
        held: Held,
    ) -> Result<Vec<(String, Tensor)>, LandingError> {
        let whole = match held {
            Held::Views => flat.shallow_clone(),
            Held::Landed(landing) => landing.land(flat)?,
            Held::LandedInOrder(landing) => landing.land_in_order(flat)?,
        };
        Ok(specs.iter().map(|s| s.name.clone()).zip(layout.views(&whole)).collect())
    }
}

/// How a snapshot of the replicas holds their tensors.
#[derive(Clone, Copy)]
pub enum Held<'a> {
    /// Views of replica 0's buffers, on its device: for a write that ends before the next step
    /// changes them (the final save, a best-kept checkpoint), which then copies nothing but the
    /// one tensor being written.
    Views,
    /// Views of host copies that `landing` queues, one per flat buffer, without waiting: for
    /// what outlives the step (a rewind point, the periodic checkpoint the writer thread
    /// writes while training goes on), read once the landing's copies have arrived.
    Landed(&'a Landing),
    /// As [`Held::Landed`], taken in order on this thread's stream first (see
    /// [`Landing::land_in_order`]): the BatchNorm statistics, which the first replica's next
    /// forward pass changes on its own stream.
    LandedInOrder(&'a Landing),
}

impl<'a> Held<'a> {
    /// How the tensors a replica's forward pass changes are held: in order where landed.
    pub fn in_order(self) -> Held<'a> {
        match self {
            Held::Landed(l) => Held::LandedInOrder(l),
            other => other,
        }
    }
}

/// Replica 0's tensors as a checkpoint holds them: by name, as views or host copies ([`Held`]).
pub struct ReplicaTensors {
    pub params: NamedTensors,
    /// Each slot of the optimizer's state (`momentum`, `exp_avg`, …), by parameter name.
    pub optimizer: Vec<(String, NamedTensors)>,
    pub buffers: NamedTensors,
    /// The moving average's parameters and buffers.
    pub ema: Option<(NamedTensors, NamedTensors)>,
}
