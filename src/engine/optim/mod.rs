//! The optimizer seam: which update rule a run uses ([`OptimConfig`]), and each replica's state
//! for it ([`OptimizerState`]) on the flat buffers. Every rule's state is a list of named slots
//! the size of the parameters (`momentum` for SGD, `exp_avg` and `exp_avg_sq` for Adam), saved in
//! checkpoints by those names, plus scratch buffers that are not.

pub mod adam;
pub mod ema;
pub mod loss_scale;
pub mod sgd;

use tch::{Device, Kind, Tensor};

use super::flat::Layout;
use adam::{Adam, AdamTensors};
use sgd::Sgd;

pub use dpt_protocol::optim::{schedule, OptimConfig, OptimizerKind};

/// 0-dim tensors for the scalars of a step, reused every step.
pub struct StepScalars {
    inv_batch: Tensor,
    neg_lr: Tensor,
    neg_lr_over_batch: Tensor,
    weight_decay: Tensor,
    momentum: Tensor,
}

impl StepScalars {
    pub fn new(device: Device) -> Self {
        let z = || Tensor::zeros([], (Kind::Float, device));
        StepScalars { inv_batch: z(), neg_lr: z(), neg_lr_over_batch: z(), weight_decay: z(), momentum: z() }
    }
}

/// The optimizer's tensors over one contiguous range of trainable parameters: views of the
/// replica's parameters, state slots and scratch buffers.
struct Part {
    offset: i64,
    len: i64,
    param: Tensor,
    slots: Vec<Tensor>,
    scratch: Vec<Tensor>,
    /// The decayed tensors inside this range, as views of the parameters and of `scratch[0]`.
    decayed_params: Vec<Tensor>,
    decayed_grads: Vec<Tensor>,
}

/// One replica's optimizer state on its device. Frozen parameters are outside every part: no
/// update, no decay, no state change (their state stays zero).
pub struct OptimizerState {
    cfg: OptimConfig,
    /// In the order of `cfg.kind.slots()`, flat like the parameters.
    slots: Vec<Tensor>,
    parts: Vec<Part>,
    scalars: StepScalars,
}

impl OptimizerState {
    /// Zeroed state for the flat parameter buffer `params` laid out by `layout`, updating the
    /// tensors `trainable` (their ranges: [`Layout::runs`]) selects.
    pub fn new(
        cfg: OptimConfig,
        params: &Tensor,
        layout: &Layout,
        trainable: impl Fn(usize) -> bool,
    ) -> Self {
        let slots: Vec<Tensor> = cfg.kind.slots().iter().map(|_| params.zeros_like()).collect();
        let scratch_count = Self::scratch_buffers(&cfg);
        // Scratch space only where there is work: the trainable ranges.
        let dims: Vec<usize> = layout.segments().map(|(_, _, d)| d).collect();
        let decayed = layout.runs(|i| trainable(i) && cfg.decays(dims[i]));
        let parts = layout
            .runs(&trainable)
            .into_iter()
            .map(|(offset, len)| {
                let scratch: Vec<Tensor> = (0..scratch_count)
                    .map(|_| Tensor::zeros([len], (Kind::Float, params.device())))
                    .collect();
                // The decayed ranges inside this part, relative to it.
                let inside: Vec<(i64, i64)> = decayed
                    .iter()
                    .filter(|(o, n)| *o >= offset && o + n <= offset + len)
                    .map(|(o, n)| (o - offset, *n))
                    .collect();
                let param = params.narrow(0, offset, len);
                let view = |t: &Tensor| inside.iter().map(|&(o, n)| t.narrow(0, o, n)).collect::<Vec<_>>();
                Part {
                    offset,
                    len,
                    decayed_params: view(&param),
                    decayed_grads: scratch.first().map(view).unwrap_or_default(),
                    slots: slots.iter().map(|t| t.narrow(0, offset, len)).collect(),
                    param,
                    scratch,
                }
            })
            .collect();
        OptimizerState { cfg, slots, parts, scalars: StepScalars::new(params.device()) }
    }

    /// Scratch buffers the size of the trainable parameters that `cfg`'s update needs beside its
    /// slots.
    pub fn scratch_buffers(cfg: &OptimConfig) -> usize {
        match cfg.kind {
            OptimizerKind::Sgd => usize::from(cfg.nesterov && cfg.momentum != 0.0),
            OptimizerKind::Adam | OptimizerKind::AdamW => 2,
        }
    }

    /// The state slots by name (flat, like the parameters).
    pub fn slots(&self) -> impl Iterator<Item = (&'static str, &Tensor)> {
        self.cfg.kind.slots().iter().copied().zip(&self.slots)
    }

    /// Fills the slot `name` from `logical` (its tensors concatenated in logical order).
    pub fn load_slot(&self, name: &str, layout: &Layout, logical: &Tensor) {
        if let Some(i) = self.cfg.kind.slots().iter().position(|s| *s == name) {
            layout.load_logical(&self.slots[i], logical);
        }
    }

    /// Updates the parameters from `grad_sum` (the flat gradient summed over `batch` samples)
    /// at learning rate `lr`; `step` counts optimizer steps, 1 on the first.
    pub fn step(&mut self, grad_sum: &Tensor, lr: f64, batch: usize, step: u64) {
        let c = self.cfg;
        for part in &mut self.parts {
            let grad = grad_sum.narrow(0, part.offset, part.len);
            match c.kind {
                OptimizerKind::Sgd => {
                    let sgd =
                        Sgd { lr, momentum: c.momentum, weight_decay: c.weight_decay, nesterov: c.nesterov };
                    sgd.step(
                        &mut part.param,
                        &grad,
                        &mut part.slots[0],
                        part.scratch.first_mut(),
                        batch,
                        &mut self.scalars,
                    );
                }
                OptimizerKind::Adam | OptimizerKind::AdamW => {
                    let adam = Adam {
                        lr,
                        betas: c.betas,
                        eps: c.eps,
                        weight_decay: c.weight_decay,
                        decoupled: c.kind == OptimizerKind::AdamW,
                    };
                    let (first, second) = part.slots.split_at_mut(1);
                    let (g, d) = part.scratch.split_at_mut(1);
                    let tensors = AdamTensors {
                        exp_avg: &mut first[0],
                        exp_avg_sq: &mut second[0],
                        grad: &mut g[0],
                        denom: &mut d[0],
                        decayed_params: &mut part.decayed_params,
                        decayed_grads: &mut part.decayed_grads,
                    };
                    adam.step(&mut part.param, &grad, tensors, batch, step, &mut self.scalars);
                }
            }
        }
    }
}
