//! Tensors of a model stored in one contiguous buffer, with one view per named tensor.
//!
//! The views are what the forward pass uses (leaves that require grad, for parameters); the flat
//! buffer is what the allreduce, the optimizer and the replica check operate on, one kernel each.
//! A 4-D tensor may be laid out channels-last (`[out, h, w, in]` in memory) inside the buffer,
//! which lets oneDNN and cuDNN take their fastest convolution paths; the [`Layout`] says where
//! and how each tensor lives, and converts to and from the logical (row-major) order that
//! initial values, checkpoints and weight files use.

use tch::{Device, Kind, Tensor};

use crate::model::TensorSpec;

/// Every tensor of a flat buffer starts at a multiple of this many scalars: 256 bytes of f32,
/// `cudaMalloc`'s own alignment. The vectorized paths of cuBLAS and of the fused optimizers
/// (`all_aligned` in PyTorch's fused Adam) need 16-byte aligned pointers, which a packed
/// layout gives most tensors by chance only (lenet's `fc1.weight` would start at byte
/// 101,000). The pads between tensors hold zeros: their gradients are zero, so no update moves
/// them.
pub const ALIGN: i64 = 64;

/// `n` rounded up to a multiple of [`ALIGN`].
pub fn align_up(n: i64) -> i64 {
    (n + ALIGN - 1) / ALIGN * ALIGN
}

/// Where tensors of `sizes` scalars start in a flat buffer, one after the other, each at a
/// multiple of [`ALIGN`]; and the buffer's length, a multiple of it too.
pub fn aligned_offsets(sizes: impl IntoIterator<Item = i64>) -> (Vec<i64>, i64) {
    let mut end = 0;
    let offsets = sizes
        .into_iter()
        .map(|n| {
            let at = align_up(end);
            end = at + n;
            at
        })
        .collect();
    (offsets, align_up(end))
}

/// Where each tensor of a flat buffer lives: offset, shape and strides.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    entries: Vec<(i64, Vec<i64>, Vec<i64>)>,
    total: i64,
}

fn row_major(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl Layout {
    /// Lays `specs` out one after the other, each at an aligned offset ([`ALIGN`]); 4-D tensors
    /// channels-last when asked.
    pub fn new(specs: &[TensorSpec], channels_last: bool) -> Self {
        let (offsets, total) = aligned_offsets(specs.iter().map(TensorSpec::numel));
        let entries = specs
            .iter()
            .zip(offsets)
            .map(|(s, offset)| {
                let strides = match s.shape.as_slice() {
                    [_, c, h, w] if channels_last => vec![h * w * c, 1, w * c, *c],
                    shape => row_major(shape),
                };
                (offset, s.shape.clone(), strides)
            })
            .collect();
        Layout { entries, total }
    }

    /// Number of scalars in the buffer.
    pub fn total(&self) -> i64 {
        self.total
    }

    /// The contiguous ranges (offset, length) of the tensors `keep(i)` selects, neighbours
    /// merged with the pad between them (zeros).
    pub fn runs(&self, keep: impl Fn(usize) -> bool) -> Vec<(i64, i64)> {
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for (i, (offset, numel, _)) in self.segments().enumerate() {
            if !keep(i) || numel == 0 {
                continue;
            }
            match runs.last_mut() {
                Some((start, len)) if align_up(*start + *len) == offset => *len = offset + numel - *start,
                _ => runs.push((offset, numel)),
            }
        }
        runs
    }

    /// Each tensor's (offset, number of scalars, dimensions) in the buffer; a tensor occupies
    /// one contiguous range whatever its memory format.
    pub fn segments(&self) -> impl Iterator<Item = (i64, i64, usize)> + '_ {
        self.entries.iter().map(|(offset, shape, _)| (*offset, shape.iter().product(), shape.len()))
    }

    /// Tensor `i`'s shape and strides in the flat buffer.
    pub fn form(&self, i: usize) -> (Vec<i64>, Vec<i64>) {
        let (_, shape, strides) = &self.entries[i];
        (shape.clone(), strides.clone())
    }

    /// One view per tensor into `flat`.
    pub fn views(&self, flat: &Tensor) -> Vec<Tensor> {
        self.entries
            .iter()
            .map(|(offset, shape, strides)| flat.as_strided(shape.as_slice(), strides.as_slice(), *offset))
            .collect()
    }

    /// The tensors of a flat buffer held in `parts` (each part's offset in the flat buffer and
    /// its values; together they cover it, in order, on any devices): a view into the part that
    /// holds a tensor whole, else that tensor's values gathered from the parts it spans, on the
    /// host (a copy of that one tensor).
    pub fn views_of_parts(&self, parts: &[(i64, Tensor)]) -> Vec<Tensor> {
        let _guard = tch::no_grad_guard();
        self.entries
            .iter()
            .map(|(offset, shape, strides)| {
                let (start, end) = (*offset, offset + shape.iter().product::<i64>());
                let spans: Vec<&(i64, Tensor)> = parts
                    .iter()
                    .filter(|(at, part)| *at < end.max(start + 1) && start < at + part.numel() as i64)
                    .collect();
                match spans.as_slice() {
                    [(at, part)] => part.as_strided(shape.as_slice(), strides.as_slice(), start - at),
                    _ => {
                        let pieces: Vec<Tensor> = spans
                            .iter()
                            .map(|(at, part)| {
                                let lo = start.max(*at);
                                let hi = end.min(at + part.numel() as i64);
                                part.narrow(0, lo - at, hi - lo).to_device(Device::Cpu)
                            })
                            .collect();
                        let joined = if pieces.is_empty() {
                            Tensor::zeros([0], (Kind::Float, Device::Cpu))
                        } else {
                            Tensor::cat(&pieces, 0)
                        };
                        joined.as_strided(shape.as_slice(), strides.as_slice(), 0)
                    }
                }
            })
            .collect()
    }

    /// Contiguous copies of the tensors of `flat`, in logical order, on `device`, one copy each
    /// and never a view of `flat`: a channels-last tensor is made row-major where it lives (on a
    /// GPU, a device copy) and then moved; a row-major one is moved, or copied once when it is on
    /// `device` already. (Moving first and copying on the host after made two or three host
    /// copies of every tensor of a rewind point or checkpoint.)
    pub fn to_logical(&self, flat: &Tensor, device: Device) -> Vec<Tensor> {
        let _guard = tch::no_grad_guard();
        self.views(flat)
            .iter()
            .map(|v| {
                let row_major = v.contiguous();
                let made = row_major.data_ptr() != v.data_ptr();
                match (row_major.device() == device, made) {
                    (false, _) => row_major.to_device(device),
                    (true, true) => row_major,
                    (true, false) => row_major.copy(),
                }
            })
            .collect()
    }

    /// Fills `flat` from `logical`, the tensors' values in logical order (row-major each):
    /// back to back, or each at its aligned offset as this layout places it (a flat of this
    /// layout's length; the two agree where no tensor needs a pad).
    pub fn load_logical(&self, flat: &Tensor, logical: &Tensor) {
        let _guard = tch::no_grad_guard();
        let padded = logical.numel() as i64 == self.total;
        let mut start = 0;
        for (mut view, (offset, shape, _)) in self.views(flat).into_iter().zip(&self.entries) {
            let n: i64 = shape.iter().product();
            let at = if padded { *offset } else { start };
            view.copy_(&logical.narrow(0, at, n).view(shape.as_slice()));
            start += n;
        }
    }
}

/// Named views over one flat `f32` buffer.
pub struct FlatTensors {
    pub flat: Tensor,
    pub views: Vec<Tensor>,
    pub names: Vec<String>,
    pub layout: Layout,
}

impl FlatTensors {
    /// Allocates zeroed storage for `specs` on `device`; with `requires_grad`, the views of the
    /// tensors that are not frozen are leaves that require grad.
    pub fn zeros(specs: &[TensorSpec], device: Device, requires_grad: bool, channels_last: bool) -> Self {
        let layout = Layout::new(specs, channels_last);
        let flat = Tensor::zeros([layout.total()], (Kind::Float, device));
        let views = {
            let _guard = tch::no_grad_guard();
            layout
                .views(&flat)
                .into_iter()
                .zip(specs)
                .map(|(v, s)| if requires_grad && !s.frozen { v.set_requires_grad(true) } else { v })
                .collect()
        };
        FlatTensors { flat, views, names: specs.iter().map(|s| s.name.clone()).collect(), layout }
    }

    /// Number of scalars.
    pub fn numel(&self) -> i64 {
        self.layout.total()
    }
}

/// The initial values of `specs`, drawn in order from libtorch's generator, as one flat CPU
/// tensor in logical order.
pub fn initial_flat(specs: &[TensorSpec]) -> Tensor {
    let parts: Vec<Tensor> = specs.iter().map(|s| s.initial_value().reshape([-1])).collect();
    if parts.is_empty() {
        Tensor::zeros([0], (Kind::Float, Device::Cpu))
    } else {
        Tensor::cat(&parts, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Builder, ModelKind};

    #[test]
    fn channels_last_round_trips_through_logical_order() {
        let mut b = Builder::default();
        crate::model::build(ModelKind::Lenet, &mut b);
        let logical = Tensor::arange(b.param_count(), (Kind::Float, Device::Cpu));
        for cl in [false, true] {
            let f = FlatTensors::zeros(&b.params, Device::Cpu, false, cl);
            f.layout.load_logical(&f.flat, &logical);
            let back = Tensor::cat(
                &f.layout
                    .to_logical(&f.flat, Device::Cpu)
                    .iter()
                    .map(|t| t.reshape([-1]))
                    .collect::<Vec<_>>(),
                0,
            );
            assert!(back.equal(&logical), "channels_last={cl}");
            // The conv weight's value at [o, i, y, x] is the same whichever the layout.
            assert_eq!(f.views[2].double_value(&[3, 4, 1, 2]), (200 + 3 * 500 + 4 * 25 + 5 + 2) as f64);
            // Copies, not views: the buffer changing afterwards leaves them as they were.
            let held = f.layout.to_logical(&f.flat, Device::Cpu);
            let _ = f.flat.shallow_clone().fill_(-1.0);
            assert!(held.iter().all(|t| t.is_contiguous()), "row-major");
            let again = Tensor::cat(&held.iter().map(|t| t.reshape([-1])).collect::<Vec<_>>(), 0);
            assert!(again.equal(&logical), "channels_last={cl}: not a view of the buffer");
        }
        let cl = Layout::new(&b.params, true);
        assert_eq!(
            cl.views(&Tensor::zeros([cl.total()], (Kind::Float, Device::Cpu)))[2].stride(),
            vec![500, 1, 100, 20]
        );
    }

    #[test]
    fn tensors_read_from_parts_equal_the_flat_buffers_and_share_a_whole_parts_storage() {
        // LeNet channels-last, split in three parts at offsets inside tensors.
        let mut b = Builder::default();
        crate::model::build(ModelKind::Lenet, &mut b);
        let layout = Layout::new(&b.params, true);
        let flat = Tensor::arange(layout.total(), (Kind::Float, Device::Cpu));
        let cuts = [0, 100, 2_000, layout.total()];
        let parts: Vec<(i64, Tensor)> =
            cuts.windows(2).map(|w| (w[0], flat.narrow(0, w[0], w[1] - w[0]).copy())).collect();
        let from_parts = layout.views_of_parts(&parts);
        let whole = layout.views(&flat);
        assert_eq!(from_parts.len(), whole.len());
        for (a, b) in from_parts.iter().zip(&whole) {
            assert_eq!(a.size(), b.size());
            assert!(a.equal(b), "same values in logical order");
        }
        // conv1.weight (180 values) spans parts 0 and 1 and is gathered; fc2.bias lies in part 2.
        let last = from_parts.last().unwrap();
        let (at, n, _) = layout.segments().last().unwrap();
        assert_eq!(last.data_ptr(), parts[2].1.narrow(0, at - 2_000, n).data_ptr());
    }

    #[test]
    fn every_tensor_starts_aligned_and_runs_and_logical_values_cross_the_pads() {
        let spec = |name: &str, shape: &[i64], frozen| TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
            init: crate::model::Init::Zeros,
            frozen,
        };
        let specs = [spec("a", &[3, 5], false), spec("b", &[0], false), spec("c", &[64], false), spec("d", &[7], true), spec("e", &[2], false)];
        let layout = Layout::new(&specs, false);
        let offsets: Vec<i64> = layout.segments().map(|(o, _, _)| o).collect();
        assert_eq!(offsets, [0, 64, 64, 128, 192]);
        assert_eq!(layout.total(), 256, "a whole number of 256-byte blocks");
        // a and c are neighbours across a's pad; d is frozen and breaks the run.
        assert_eq!(layout.runs(|i| !specs[i].frozen), [(0, 128), (192, 2)]);
        // Logical values load back to back or at the layout's own offsets alike.
        let packed = Tensor::arange(15 + 64 + 7 + 2, (Kind::Float, Device::Cpu));
        let (flat, again) = (Tensor::zeros([256], tch::kind::FLOAT_CPU), Tensor::zeros([256], tch::kind::FLOAT_CPU));
        layout.load_logical(&flat, &packed);
        layout.load_logical(&again, &flat);
        assert!(again.equal(&flat));
        assert_eq!(flat.double_value(&[64]), 15.0, "c's first value at its aligned offset");
        assert_eq!(flat.narrow(0, 15, 49).abs().sum(Kind::Double).double_value(&[]), 0.0, "the pad stays zero");
    }
}
