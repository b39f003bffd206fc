//! Tensors of a model stored in one contiguous buffer, with one view per named tensor.
//!
//! The views are what the forward pass uses (leaves that require grad, for parameters); the flat
//! buffer is what the allreduce, the optimizer and the replica check operate on, one kernel each.

use tch::{Device, Kind, Tensor};

use crate::model::TensorSpec;

/// Named views over one flat `f32` buffer.
pub struct FlatTensors {
    pub flat: Tensor,
    pub views: Vec<Tensor>,
    pub names: Vec<String>,
}

impl FlatTensors {
    /// Allocates zeroed storage for `specs` on `device`.
    pub fn zeros(specs: &[TensorSpec], device: Device, requires_grad: bool) -> Self {
        let total: i64 = specs.iter().map(TensorSpec::numel).sum();
        let flat = Tensor::zeros([total], (Kind::Float, device));
        let _guard = tch::no_grad_guard();
        let mut offset = 0;
        let views = specs
            .iter()
            .map(|s| {
                let v = flat.narrow(0, offset, s.numel()).view(s.shape.as_slice());
                offset += s.numel();
                if requires_grad {
                    v.set_requires_grad(true)
                } else {
                    v
                }
            })
            .collect();
        FlatTensors { flat, views, names: specs.iter().map(|s| s.name.clone()).collect() }
    }

    /// Number of scalars.
    pub fn numel(&self) -> i64 {
        self.flat.size()[0]
    }

    /// Deep copies of every named tensor, on the CPU (for saving).
    pub fn named_cpu(&self) -> Vec<(String, Tensor)> {
        let _guard = tch::no_grad_guard();
        self.names
            .iter()
            .zip(&self.views)
            .map(|(n, v)| (n.clone(), v.detach().to_device(Device::Cpu).copy()))
            .collect()
    }
}

/// The initial values of `specs`, drawn in order from libtorch's generator, as one flat CPU tensor.
pub fn initial_flat(specs: &[TensorSpec]) -> Tensor {
    let parts: Vec<Tensor> = specs.iter().map(|s| s.initial_value().reshape([-1])).collect();
    if parts.is_empty() {
        Tensor::zeros([0], (Kind::Float, Device::Cpu))
    } else {
        Tensor::cat(&parts, 0)
    }
}
