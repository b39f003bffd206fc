//! The replicas' tensors as the coordinator holds them: shallow handles on every worker's flat
//! parameter, gradient and buffer storage, and each replica's optimizer state (its shard under
//! `--zero 1`); the model's names and layouts (`layout.rs`) turn them into named tensors, and a
//! checkpoint reads them by name (`replicas/by_name.rs`).

use tch::{Device, Tensor};

pub use super::layout::{Held, ModelLayout, ReplicaTensors};

use crate::dist::World;
use crate::engine::optim::ema::Ema;
use crate::engine::optim::loss_scale::{non_finite, DeviceScaler};
use crate::engine::optim::{OptimConfig, OptimizerState, ShardGrid, Span, Zero};
use crate::engine::worker::ReplicaHandles;
use crate::engine::EngineError;
use crate::model::TensorSpec;
use crate::persist::resume::Resume;
use crate::record::run_info::StateBytes;

mod by_name;
mod grad_norm;
pub use by_name::StateByName;
use grad_norm::GradNorm;

/// Every replica's tensors in this process.
pub struct Replicas {
    layout: ModelLayout,
    params: Vec<Tensor>,
    grads: Vec<Tensor>,
    buffers: Vec<Tensor>,
    optim: Vec<OptimizerState>,
    /// Each replica's device.
    devices: Vec<Device>,
    /// The weights' moving average (`--ema`), on replica 0's device.
    ema: Option<Ema>,
    /// Replica 0's tensors by name (views into its buffers).
    named: Vec<(String, Tensor)>,
    /// The global index of this process's first replica, and the run's replicas in all: the
    /// grid that cuts every replica's update alike, whose parts `--zero 1` splits the
    /// optimizer state into.
    span: (usize, usize),
    /// The run's ZeRO stage (the replicas' optimizer settings').
    zero: Zero,
}

impl Replicas {
    /// The tensors of this process's replicas, the first of them replica `span.0` of the run's
    /// `span.1`, added in turn ([`Replicas::add`]).
    pub fn over(layout: ModelLayout, span: (usize, usize)) -> Self {
        Replicas {
            span,
            layout,
            params: Vec::new(),
            grads: Vec::new(),
            buffers: Vec::new(),
            optim: Vec::new(),
            devices: Vec::new(),
            ema: None,
            named: Vec::new(),
            zero: Zero::Off,
        }
    }

    /// Each replica's device, in replica order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Replica `i`'s flat gradient (a shallow handle on its buffer): the whole flat buffer's,
    /// or under `--zero 2` its shard's ([`Replicas::grad_range`]).
    pub fn grad(&self, i: usize) -> Tensor {
        self.grads[i].shallow_clone()
    }

    /// The run's grid over the flat parameters: a part per replica of the run.
    pub fn grid(&self) -> ShardGrid {
        ShardGrid::new(self.layout.params.total(), self.span.1)
    }

    /// Whether each replica keeps only its shard of the gradient sums (`--zero 2`).
    pub fn shards_gradients(&self) -> bool {
        self.zero.grad_shard(self.grid(), self.span.0).is_some()
    }

    /// The span of the flat buffer replica `i`'s gradient buffer holds.
    pub fn grad_range(&self, i: usize) -> Span {
        self.zero.grad_shard(self.grid(), self.span.0 + i).unwrap_or_else(|| self.grid().whole())
    }

    /// Starts the moving average of the weights from replica 0's (or from `saved`, a
    /// checkpoint's, parameters then buffers in logical order).
    pub fn start_ema(&mut self, decay: f64, saved: Option<&(Tensor, Tensor)>) {
        let ema = Ema::new(decay, &self.params[0], &self.buffers[0]);
        if let Some((p, b)) = saved {
            self.layout.params.load_logical(&ema.params, p);
            self.layout.buffers.load_logical(&ema.buffers, b);
        }
        self.ema = Some(ema);
    }

    /// Folds replica 0's tensors into the moving average (after the update and the buffers'
    /// copy).
    pub fn update_ema(&mut self) {
        if let Some(ema) = &mut self.ema {
            ema.update(&self.params[0], &self.buffers[0]);
        }
    }

    /// Puts the moving average's weights in every replica and returns the trained ones (replica
    /// 0's), for [`Replicas::put_back`]; the workers are idle between steps, so they see only one
    /// or the other.
    pub fn swap_in_ema(&mut self) -> Option<(Tensor, Tensor)> {
        let ema = self.ema.as_ref()?;
        let _guard = tch::no_grad_guard();
        let own = (self.params[0].copy(), self.buffers[0].copy());
        for (p, b) in self.params.iter_mut().zip(self.buffers.iter_mut()) {
            p.copy_(&ema.params);
            b.copy_(&ema.buffers);
        }
        Some(own)
    }

    /// Puts the trained weights [`Replicas::swap_in_ema`] took out back in every replica.
    pub fn put_back(&mut self, own: (Tensor, Tensor)) {
        let _guard = tch::no_grad_guard();
        for (p, b) in self.params.iter_mut().zip(self.buffers.iter_mut()) {
            p.copy_(&own.0);
            b.copy_(&own.1);
        }
    }

    /// Takes a ready replica's handles (in replica order) and makes its optimizer state.
    pub fn add(&mut self, handles: ReplicaHandles, optim: OptimConfig) {
        let ReplicaHandles { params, grads, buffers, named_params, named_buffers, .. } = handles;
        let specs = &self.layout.param_specs;
        let grid = self.grid();
        let shard = optim.zero.shard(grid, self.span.0 + self.optim.len());
        self.zero = optim.zero;
        let cuts = grid.cuts();
        let trainable = |i: usize| !specs[i].frozen;
        self.optim.push(OptimizerState::new(optim, &params, &self.layout.params, trainable, (shard, &cuts)));
        self.devices.push(params.device());
        self.params.push(params);
        self.grads.push(grads);
        self.buffers.push(buffers);
        if self.named.is_empty() {
            self.named = named_params.into_iter().chain(named_buffers).collect();
        }
    }

    /// A replica made here from flat parameters and buffers (a unit test's, without a worker).
    #[cfg(test)]
    pub fn add_flat(&mut self, params: Tensor, buffers: Tensor, optim: OptimConfig) {
        let grads = params.zeros_like();
        let views = |flat: &Tensor,
                     layout: &crate::engine::flat::Layout,
                     specs: &[TensorSpec]|
         -> Vec<(String, Tensor)> {
            specs.iter().map(|s| s.name.clone()).zip(layout.views(flat)).collect()
        };
        let named_params = views(&params, &self.layout.params, &self.layout.param_specs);
        let named_buffers = views(&buffers, &self.layout.buffers, &self.layout.buffer_specs);
        let handles = ReplicaHandles { params, grads, buffers, named_params, named_buffers, sink: None };
        self.add(handles, optim);
    }

    /// Puts a checkpoint's (or a rewind point's) tensors in every replica: the weights, the
    /// buffers, the optimizer state and the moving average.
    pub fn load(&mut self, r: &Resume) {
        for (p, b) in self.params.iter().zip(&self.buffers) {
            self.layout.params.load_logical(p, &r.params);
            self.layout.buffers.load_logical(b, &r.buffers);
        }
        self.restore_optimizer(r);
        if let Some(ema) = &self.ema {
            let decay = ema.decay;
            self.start_ema(decay, r.ema.as_ref());
        }
    }

    /// Restores every replica's optimizer state from a checkpoint.
    fn restore_optimizer(&self, resume: &Resume) {
        for state in &self.optim {
            for (slot, logical) in &resume.optimizer {
                state.load_slot(slot, &self.layout.params, logical);
            }
        }
    }

    /// Updates replica `i` from the reduced gradient in `grads[holder]` (the optimizer leaves it
    /// as it is, so replicas may share a holder) at `lr` (or the rate on the device); `found_inf`:
    /// the loss scaler's flag on replica `i`'s device.
    pub fn update(&mut self, i: usize, holder: usize, lr: (f64, Option<&Tensor>), found_inf: Option<&Tensor>) {
        let from = self.grad_range(holder).start;
        self.optim[i].step((&self.grads[holder], from), lr, found_inf);
    }

    /// Whether each replica holds only its shard of the optimizer state (`--zero 1`).
    pub fn sharded(&self) -> bool {
        self.optim.first().is_some_and(|o| o.shard() != self.grid().whole())
    }

    /// Under `--zero 1`, copies each replica's updated shard of the weights into every other
    /// replica (the all-gather), so that all hold the same weights again: within the process by
    /// copies, then from each of `world`'s ranks its block (its replicas' shards, together in
    /// its replica 0) by a broadcast; nothing unsharded.
    pub fn gather_shards(&mut self, world: Option<&World>) -> Result<(), EngineError> {
        if !self.sharded() {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        for (i, state) in self.optim.iter().enumerate() {
            let shard = state.shard();
            if shard.is_empty() {
                continue;
            }
            let updated = self.params[i].narrow(0, shard.start, shard.len);
            for (j, params) in self.params.iter().enumerate() {
                if j != i {
                    params.narrow(0, shard.start, shard.len).copy_(&updated);
                }
            }
        }
        let Some(w) = world.filter(|w| w.size > 1) else { return Ok(()) };
        // Every rank sends its block in turn (rank order) and takes the others'.
        for r in 0..w.size {
            let span = self.block_of(w, r);
            if span.is_empty() {
                continue;
            }
            let mut block = self.params[0].narrow(0, span.start, span.len);
            w.broadcast_from(&mut block, r)?;
            if r != w.rank {
                for params in &self.params[1..] {
                    params.narrow(0, span.start, span.len).copy_(&block);
                }
            }
        }
        Ok(())
    }

    /// The span of the flat parameters whose optimizer state rank `r`'s replicas hold
    /// together (their grid parts, neighbours).
    pub fn block_of(&self, w: &World, r: usize) -> Span {
        self.grid().parts_from(w.replica_offset_of(r), w.replicas[r])
    }

    /// Whether the optimizer state is split over several processes (`--zero 1` in a run of
    /// `world`): a checkpoint's state is then gathered from every rank.
    pub fn split_over(&self, world: Option<&World>) -> bool {
        self.sharded() && world.is_some_and(|w| w.size > 1)
    }

    /// What one replica holds for the whole run: its flat weights and gradient sums, and its
    /// optimizer state (all of it, or under `--zero 1` the largest of this process's shards,
    /// one of the run's as many as it has replicas).
    pub fn state_bytes(&self) -> StateBytes {
        let bytes = |t: &Tensor| (t.numel() * t.kind().elt_size_in_bytes()) as u64;
        StateBytes {
            weights: self.params.first().map_or(0, bytes),
            gradients: self.grads.first().map_or(0, bytes),
            optimizer: self
                .optim
                .iter()
                .map(|o| o.slots().map(|(_, t)| bytes(t)).sum::<u64>())
                .max()
                .unwrap_or(0),
            optimizer_shards: if self.sharded() { self.span.1 } else { 1 },
            gradient_shards: if self.shards_gradients() { self.span.1 } else { 1 },
            // The exchange knows the buckets (see `Exchange::bucket_buffer_bytes`).
            bucket_buffers: 0,
        }
    }

    /// Sets every replica's count of optimizer steps taken.
    pub fn set_steps(&mut self, taken: u64) {
        for state in &mut self.optim {
            state.set_steps(taken);
        }
    }

    /// The ranges of the flat gradient that carry gradients (the trainable parameters'): what
    /// the allreduce sums. At least one range (empty when nothing trains).
    pub fn trainable_runs(&self) -> Vec<Span> {
        let specs = &self.layout.param_specs;
        let runs = self.layout.params.runs(|i| !specs[i].frozen);
        if runs.is_empty() {
            vec![Span::default()]
        } else {
            runs.into_iter().map(|(start, len)| Span { start, len }).collect()
        }
    }

    /// Each replica's gradient over `run`, as views of its flat buffer.
    pub fn grads_over(&self, span: Span) -> Vec<Tensor> {
        self.grads.iter().map(|g| g.narrow(0, span.start, span.len)).collect()
    }

    /// The global L2 norm of the mean gradient (as reduced: the workers divided their losses) in the
    /// buffers `holders` name, as a 0-dim tensor on replica 0's device (no host sync); with
    /// `max_norm`, first scales every holder's gradient as `clip_grad_norm_` does. Under
    /// `--zero 2` each replica holds a shard of the sum: the norm is summed from every shard's,
    /// over `world`'s ranks too (see `grad_norm.rs`).
    pub fn grad_norm(
        &mut self,
        holders: &[usize],
        max_norm: Option<f64>,
        world: Option<&World>,
    ) -> Result<Tensor, EngineError> {
        let norm = GradNorm { max_norm, device: self.params[0].device() };
        match self.shards_gradients() {
            true => norm.of_shards(&mut self.grads, world),
            false => Ok(norm.of_holders(&mut self.grads, holders)),
        }
    }

    /// Unscales the reduced gradient in every buffer `holders` names, checked into the
    /// scaler's `found_inf` on the device (every holder carries the same sum).
    pub fn unscale(&mut self, holders: &[usize], scaler: &mut DeviceScaler) {
        for (i, &h) in holders.iter().enumerate() {
            if !holders[..i].contains(&h) {
                scaler.unscale(&mut self.grads[h]);
            }
        }
    }

    /// Copies replica 0's BatchNorm statistics (the global replica 0's, across processes) to
    /// every replica.
    pub fn share_buffers(&mut self, world: Option<&World>) -> Result<(), EngineError> {
        if let Some((first, rest)) = self.buffers.split_first_mut() {
            if let Some(w) = world {
                if first.numel() > 0 {
                    w.broadcast(first)?;
                }
            }
            for b in rest {
                b.copy_(first);
            }
        }
        Ok(())
    }

    /// The first replica whose parameters or buffers differ from replica 0's.
    pub fn first_diverged(&self) -> Option<usize> {
        let dev0 = self.params[0].device();
        let same = |a: &Tensor, b: &Tensor| a.to_device(dev0).equal(b);
        (1..self.params.len())
            .find(|&i| !same(&self.params[i], &self.params[0]) || !same(&self.buffers[i], &self.buffers[0]))
    }

    /// Whether replica 0's parameters hold a NaN or an infinity, as a one-element tensor on
    /// their device ([`non_finite`]; the caller fences, then reads).
    pub fn non_finite_params(&self) -> Tensor {
        non_finite(&self.params[0])
    }

    /// Replica 0's named tensors (parameters, then buffers) as the module names them: views of
    /// its buffers, on its device.
    pub fn named_views(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
    }

    /// Replica 0's named tensors on the host: views where replica 0 is on the CPU (what a run
    /// hands back when it ends, when nothing trains them any more), copies from a GPU.
    pub fn named_host(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.detach().to_device(Device::Cpu))).collect()
    }

    /// Replica 0's state by name, as a checkpoint reads it, its optimizer state gathered over
    /// `world`'s ranks where it is split over them ([`Replicas::split_over`]).
    pub fn by_name<'a>(&'a self, world: Option<&'a World>) -> StateByName<'a> {
        StateByName {
            layout: &self.layout,
            params: &self.params[0],
            buffers: &self.buffers[0],
            optim: &self.optim,
            ema: self.ema.as_ref(),
            sharded: self.sharded(),
            first: self.span.0,
            grid: self.grid(),
            split: world.filter(|_| self.split_over(world)),
        }
    }

    /// Number of parameters.
    pub fn param_count(&self) -> i64 {
        self.layout.param_specs.iter().map(TensorSpec::numel).sum()
    }
}
