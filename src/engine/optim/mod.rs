//! The optimizer seam: which update rule a run uses ([`OptimConfig`]), and each replica's state
//! for it ([`OptimizerState`]) on the flat buffers. Every rule's state is a list of named slots
//! the size of the parameters (`momentum` for SGD, `exp_avg` and `exp_avg_sq` for Adam), saved in
//! checkpoints by those names.
//!
//! The update is PyTorch's fused kernel for the rule (`torch._fused_sgd_`, `_fused_adam_`,
//! `_fused_adamw_`, what `torch.optim.SGD/Adam/AdamW(fused=True)` call; CUDA and CPU kernels):
//! one pass that reads each parameter, its gradient and its state once and writes the
//! parameter and its state back, and the step count a tensor on the device, so a step reads
//! nothing from the host. The gradient arrives as the mean over the step's batch (the workers
//! divide their loss by the batch, `LossFactor`), so the kernel gets no `grad_scale` and
//! writes no gradient back (with one, the fused Adam kernels store the divided gradient: a
//! full write of the gradient per step). Weight decay is per tensor, as parameter groups give it: the tensors the decay rule
//! selects in one call, the others in a second with none.
//!
//! Under `--zero 1` a replica's state covers one shard of the flat parameters
//! ([`dpt_core::optim::Zero::shard`]): its slots are the shard's length, its groups the
//! trainable ranges inside the shard, and its step updates those ranges only. With several
//! replicas the ranges are cut at the shards' boundaries whether or not the state is split
//! (`cuts`): the fused CPU kernels' vector loops and thread chunks start where a range starts,
//! so cutting them alike keeps a sharded update bit-equal to an unsharded one.

pub mod ema;
pub mod loss_scale;

use tch::{Kind, Tensor};

use super::flat::Layout;
use dpt_sys::c10d::optim::{fused_adam, fused_sgd, AdamStep, OnDevice, SgdStep};

pub use dpt_core::optim::{schedule, OptimConfig, OptimizerKind, ShardGrid, Span, Zero};

/// Trainable tensors that share a weight decay, as views of the replica's flat buffers.
struct Group {
    weight_decay: f64,
    /// Their ranges of the flat buffers (the gradient's views are taken from them each step).
    ranges: Vec<Span>,
    params: Vec<Tensor>,
    /// Per slot, in the order of `cfg.kind.slots()`, the same ranges of it.
    slots: Vec<Vec<Tensor>>,
    /// The step count, once per tensor (views of one 0-dim tensor).
    steps: Vec<Tensor>,
}

/// One replica's optimizer state on its device. Frozen parameters are in no group: no update,
/// no decay, no state change (their state stays zero).
pub struct OptimizerState {
    cfg: OptimConfig,
    /// The span of the flat parameters this state covers (all of them unsharded).
    shard: Span,
    /// In the order of `cfg.kind.slots()`, flat like the parameters over `shard`.
    slots: Vec<Tensor>,
    groups: Vec<Group>,
    /// 0-dim float32 on the device: the steps taken, as Adam's bias correction counts them.
    step: Tensor,
}

impl OptimizerState {
    /// Zeroed state for the flat parameter buffer `params` laid out by `layout`, updating the
    /// tensors `trainable` (their ranges: [`Layout::runs`]) selects within `shard`, the span
    /// of the flat buffer this replica updates (the whole buffer unsharded), each range cut at
    /// the offsets `cuts` (the run's grid's).
    pub fn new(
        cfg: OptimConfig,
        params: &Tensor,
        layout: &Layout,
        trainable: impl Fn(usize) -> bool,
        (shard, cuts): (Span, &[i64]),
    ) -> Self {
        let (start, end) = (shard.start, shard.end());
        let slots: Vec<Tensor> = cfg
            .kind
            .slots()
            .iter()
            .map(|_| Tensor::zeros([end - start], (Kind::Float, params.device())))
            .collect();
        let scalar = || Tensor::zeros([], (Kind::Float, params.device()));
        let step = scalar();
        let dims: Vec<usize> = layout.segments().map(|(_, _, d)| d).collect();
        let groups = [(true, cfg.weight_decay), (false, 0.0)]
            .into_iter()
            .map(|(decayed, weight_decay)| {
                let ranges: Vec<Span> = layout
                    .runs(|i| trainable(i) && cfg.decays(dims[i]) == decayed)
                    .into_iter()
                    .filter_map(|(o, n)| {
                        let (lo, hi) = (o.max(start), (o + n).min(end));
                        (lo < hi).then_some((lo, hi))
                    })
                    .flat_map(|(lo, hi)| {
                        let inner = cuts.iter().copied().filter(move |&c| lo < c && c < hi);
                        let bounds: Vec<i64> =
                            std::iter::once(lo).chain(inner).chain(std::iter::once(hi)).collect();
                        bounds.windows(2).map(|w| Span::between(w[0], w[1])).collect::<Vec<_>>()
                    })
                    .collect();
                Group {
                    weight_decay,
                    params: ranges.iter().map(|r| params.narrow(0, r.start, r.len)).collect(),
                    slots: slots
                        .iter()
                        .map(|s| ranges.iter().map(|r| s.narrow(0, r.start - start, r.len)).collect())
                        .collect(),
                    steps: ranges.iter().map(|_| step.shallow_clone()).collect(),
                    ranges,
                }
            })
            .filter(|g| !g.ranges.is_empty())
            .collect();
        OptimizerState { cfg, shard, slots, groups, step }
    }

    /// The span of the flat parameters this state covers.
    pub fn shard(&self) -> Span {
        self.shard
    }

    /// The state slots by name (flat, like the parameters over [`OptimizerState::shard`]).
    pub fn slots(&self) -> impl Iterator<Item = (&'static str, &Tensor)> {
        self.cfg.kind.slots().iter().copied().zip(&self.slots)
    }

    /// Fills the slot `name` from `logical` (its tensors concatenated in logical order): the
    /// whole slot laid out on the host, then this state's shard of it copied in.
    pub fn load_slot(&self, name: &str, layout: &Layout, logical: &Tensor) {
        let Some(i) = self.cfg.kind.slots().iter().position(|s| *s == name) else { return };
        let shard = self.shard;
        if shard == (Span { start: 0, len: layout.total() }) {
            layout.load_logical(&self.slots[i], logical);
            return;
        }
        let whole = Tensor::zeros([layout.total()], (Kind::Float, tch::Device::Cpu));
        layout.load_logical(&whole, logical);
        let _guard = tch::no_grad_guard();
        self.slots[i].shallow_clone().copy_(&whole.narrow(0, shard.start, shard.len));
    }

    /// Sets the count of steps taken (a resumed or rewound run's: its steps less the skipped
    /// ones), which Adam's bias correction goes by.
    pub fn set_steps(&mut self, taken: u64) {
        let _ = self.step.fill_(taken as f64);
    }

    /// Updates the parameters from `grad` (the flat mean gradient of the step's batch, from flat
    /// offset `grads_from` on: the whole buffer from 0, or under `--zero 2` the shard's range)
    /// at learning rate `lr` (read from `device_lr` instead where given: a `DeviceLr`'s, which a
    /// CUDA graph's replays read), counting the step on the device; `grad` is left as it is. `found_inf`
    /// (dynamic loss scaling's, on this device): when it holds 1 the kernels change nothing and
    /// the step is not counted, as `torch.optim`'s fused step does under GradScaler.
    pub fn step(
        &mut self,
        (grad, grads_from): (&Tensor, i64),
        (lr, device_lr): (f64, Option<&Tensor>),
        found_inf: Option<&Tensor>,
    ) {
        let _guard = tch::no_grad_guard();
        let c = self.cfg;
        let _ = self.step.g_add_scalar_(1.0);
        let on_device = OnDevice { grad_scale: None, found_inf, lr: device_lr };
        for g in &self.groups {
            let grads: Vec<Tensor> =
                g.ranges.iter().map(|r| grad.narrow(0, r.start - grads_from, r.len)).collect();
            let done = match c.kind {
                OptimizerKind::Sgd => {
                    let h = SgdStep {
                        lr,
                        momentum: c.momentum,
                        weight_decay: g.weight_decay,
                        nesterov: c.nesterov,
                        // The buffers start at zero: `mu * 0 + g` is the first step's copy.
                        first_step: false,
                    };
                    let buffers = g.slots.first().map_or(&[][..], Vec::as_slice);
                    fused_sgd(&g.params, &grads, buffers, h, on_device)
                }
                OptimizerKind::Adam | OptimizerKind::AdamW => {
                    let h = AdamStep {
                        lr,
                        betas: c.betas,
                        eps: c.eps,
                        weight_decay: g.weight_decay,
                        decoupled: c.kind == OptimizerKind::AdamW,
                    };
                    fused_adam(&g.params, &grads, (&g.slots[0], &g.slots[1]), &g.steps, h, on_device)
                }
            };
            if let Err(e) = done {
                // The coordinator's failure path reports a panic in an update with the replica.
                panic!("the fused optimizer step failed: {}", e.0);
            }
        }
        if let Some(found) = found_inf {
            let _ = self.step.g_sub_(&found.reshape([]));
        }
    }
}
