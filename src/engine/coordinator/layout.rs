//! How the replicas' tensors are named and laid out in the flat buffers, and how a snapshot of
//! them holds the tensors: views of the training buffers or host copies.

use tch::{Device, Tensor};

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
    ) -> Vec<(String, Tensor)> {
        let tensors = match held {
            Held::Views => layout.views(flat),
            Held::Copies => layout.to_logical(flat, Device::Cpu),
        };
        specs.iter().map(|s| s.name.clone()).zip(tensors).collect()
    }
}

/// How a snapshot of the replicas holds their tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Views of replica 0's buffers, on its device: for a write that ends before the next step
    /// changes them (the final save, a best-kept checkpoint), which then copies nothing but the
    /// one tensor being written.
    Views,
    /// Copies on the host: for what outlives the step (a rewind point, the periodic checkpoint
    /// the writer thread writes while training goes on).
    Copies,
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
