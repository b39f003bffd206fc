//! What the update touches: the replicas' tensors with their optimizer state, the dynamic loss
//! scaler's state on the device, and the replica being touched now (named if touching it
//! fails). A step's update is GradScaler's check of the reduced gradient, then clipping and the
//! optimizer's update of every replica at the step's lr; an overflowed step is skipped by the
//! fused kernels themselves (they read the check on the device), so no step reads the host.

use std::time::Duration;

use tch::Tensor;

use super::replicas::{Held, ReplicaTensors};
use super::update_graph::{UpdateGraph, UpdateStep};
use super::{ModelLayout, Replicas};
use crate::device::gpu_wait::Waiting;
use crate::device::landing::{LandingError, WriteFence};
use crate::dist::World;
use crate::engine::optim::loss_scale::{finite, DeviceScaler, ScalerFigures};
use crate::engine::optim::OptimConfig;
use crate::engine::worker::{LossFactor, ReplicaHandles};
use crate::engine::EngineError;
use crate::persist::resume::Resume;
use dpt_core::device::DeviceId;
use dpt_core::optim::loss_scale::LossScaler;
use dpt_core::optim::loss_scale::LossScaling;

/// What the update is asked to do, from the run's settings.
#[derive(Debug, Clone)]
pub(super) struct UpdateSettings {
    pub(super) optimizer: OptimConfig,
    /// Dynamic loss scaling (`precision.loss_scale`).
    pub(super) scaling: Option<LossScaling>,
    /// `recipe.clip_grad_norm`.
    pub(super) clip: Option<f64>,
    /// `recipe.ema`: the moving average's decay.
    pub(super) ema: Option<f64>,
    /// `placement.check_replicas`: every replica compared with replica 0 after each step.
    pub(super) check_replicas: bool,
    /// Where host reads of the replicas' values wait, and for how long at most (the first
    /// device, the step timeout).
    pub(super) fence: (DeviceId, Duration),
    /// A test's injected panic while updating replica R at step S.
    pub(super) fault: Option<(usize, usize)>,
    /// The global index of this process's first replica, and the run's replicas in all
    /// (which `--zero 1` splits the optimizer state over).
    pub(super) replicas: (usize, usize),
    /// The update is captured as a CUDA graph (one replica in the run, its steps graphed):
    /// `Some(stand_in)`, where `stand_in` is the `graph-stand-in` test fault's (`Some(fails)`).
    pub(super) graph: Option<Option<bool>>,
}

/// A step's update done: where its norm was taken, `[the mean gradient's norm before clipping,
/// 1]` on the device (`[0, 0]` for an overflowed step, which the report leaves out); why the
/// update's graph could not be captured, once.
pub(super) struct Applied {
    pub(super) grad_norm: Option<Tensor>,
    pub(super) uncaptured: Option<String>,
}

pub(super) struct Update {
    settings: UpdateSettings,
    replicas: Replicas,
    /// Dynamic loss scaling's state (`precision.loss_scale`), on the first replica's device.
    scaler: Option<DeviceScaler>,
    /// The replica whose tensors this thread is touching now, to name it if that fails.
    touching: Option<usize>,
    /// Host copies of the tensors still being read on a copy stream: held before the next
    /// change of them.
    copies: WriteFence,
    /// The update's CUDA graph, where it has one ([`UpdateSettings::graph`]).
    graph: Option<UpdateGraph>,
}

impl Update {
    pub(super) fn new(layout: ModelLayout, settings: UpdateSettings) -> Update {
        Update {
            replicas: Replicas::over(layout, settings.replicas),
            settings,
            scaler: None,
            touching: None,
            copies: WriteFence::default(),
            graph: None,
        }
    }

    /// Takes a ready replica's handles (in replica order) and makes its optimizer state.
    pub(super) fn adopt(&mut self, handles: ReplicaHandles) {
        self.replicas.add(handles, self.settings.optimizer);
    }

    /// Every replica is in: starts the moving average and the loss scale (a checkpoint's
    /// state, if any, is [`Update::restore`]d after).
    pub(super) fn begin(&mut self) {
        if let Some(decay) = self.settings.ema {
            self.replicas.start_ema(decay, None);
        }
        self.start(None, 0);
        let device = self.first_device();
        self.graph = self.settings.graph.map(|stand_in| UpdateGraph::new(device, stand_in));
    }

    /// Puts a checkpoint's (or a rewind point's) tensors in every replica and continues its
    /// loss scale and step count.
    pub(super) fn restore(&mut self, point: &Resume) -> Result<(), EngineError> {
        self.writing()?;
        self.replicas.load(point);
        self.start(point.state.loss_scaler, point.state.global_step);
        // The loss scale's tensors are new: a graph of the update would read the old ones.
        if let Some(g) = &mut self.graph {
            g.forget();
        }
        Ok(())
    }

    /// Host copies of the replicas' tensors queued on a copy stream
    /// ([`crate::device::landing::Landing`]): their next change waits for them.
    pub(super) fn landed(&mut self, fence: WriteFence) {
        self.copies.join(fence);
    }

    /// Before a change of the replicas' tensors: this thread's streams wait for the copies of
    /// them still being read (on the GPU; the host does not wait).
    fn writing(&mut self) -> Result<(), EngineError> {
        self.copies.hold().map_err(|e| EngineError::from(LandingError::from(e)))
    }

    /// Starts (or continues) the run at `global_step` steps done, with the loss scaler `saved`
    /// (a checkpoint's; a fresh one by the settings without): the scaler on the first replica's
    /// device, and every replica's count of steps taken (those done, less the skipped ones).
    fn start(&mut self, saved: Option<LossScaler>, global_step: usize) {
        let host = self.settings.scaling.map(|cfg| {
            saved.map_or_else(
                || LossScaler::new(cfg),
                |s| LossScaler { init: cfg.init, growth_interval: cfg.growth_interval, ..s },
            )
        });
        let device = self.first_device();
        let skipped = host.map_or(0, |s| s.skipped);
        self.scaler = host.map(|h| DeviceScaler::new(h, device));
        self.replicas.set_steps((global_step as u64).saturating_sub(skipped));
    }

    /// The first replica's device (the CPU before any replica is in).
    pub(super) fn first_device(&self) -> tch::Device {
        self.replicas.devices().first().copied().unwrap_or(tch::Device::Cpu)
    }

    /// The replicas' tensors, to read (their gradients are what the exchange sums).
    pub(super) fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// The scaler's state on the host, for a checkpoint or a rewind point (reads the device).
    pub(super) fn scaler_state(&self) -> Option<LossScaler> {
        self.scaler.as_ref().map(DeviceScaler::host)
    }

    /// The scaler's state as figures on its device, for a host copy that does not wait.
    pub(super) fn scaler_figures_now(&self) -> Option<ScalerFigures> {
        self.scaler.as_ref().map(DeviceScaler::figures)
    }

    /// A report window's loss-scale figures on the device, `[scale, steps skipped since the
    /// last call]` (no read; none without scaling).
    pub(super) fn scaler_figures(&mut self) -> Option<Tensor> {
        self.scaler.as_mut().map(DeviceScaler::report_figures)
    }

    /// Each replica's factor on its loss for a `batch`-sample step, which makes the gradient
    /// the mean over the batch: `1 / batch`, or with scaling the scale over the batch, computed
    /// once on the scaler's device (no host read) and copied device to device.
    pub(super) fn loss_factors(&self, batch: usize) -> Vec<LossFactor> {
        let devices = self.replicas.devices();
        match &self.scaler {
            Some(s) => {
                let factor = s.loss_factor(batch);
                devices.iter().map(|&d| LossFactor::Scaled(factor.to_device(d))).collect()
            }
            None => devices.iter().map(|_| LossFactor::Mean(batch)).collect(),
        }
    }

    /// The update of a step from the reduced gradient (the mean over the step's batch) in the
    /// buffers `holders` name: GradScaler's check, clipping, the optimizer's update of every replica at `lr`
    /// (which an overflowed step leaves as it was, on the device), the loss scale moved,
    /// BatchNorm statistics shared (over `world`'s ranks too), the moving average. The norm is
    /// taken where clipping needs it, else only when `report_norm` asks (a report window's last
    /// step: a norm per step costs launches a step without clipping has no use for).
    pub(super) fn step(
        &mut self,
        holders: &[usize],
        (lr, global_step): (f64, usize),
        report_norm: bool,
        world: Option<&World>,
    ) -> Result<Applied, EngineError> {
        self.writing()?;
        let next = self.graph.as_mut().map_or(UpdateStep::Eager, UpdateGraph::next);
        match (next, self.graph.take()) {
            (UpdateStep::Capture | UpdateStep::Replay, Some(graph)) => {
                self.graphed(graph, holders, (lr, global_step), report_norm)
            }
            (_, graph) => {
                self.graph = graph;
                let grad_norm = self.apply(holders, (lr, None), global_step, report_norm, world)?;
                Ok(Applied { grad_norm, uncaptured: None })
            }
        }
    }

    /// The update itself, at `lr` (or the rate on the device); the norm where clipping needs it or
    /// `take_norm` asks.
    fn apply(
        &mut self,
        holders: &[usize],
        lr: (f64, Option<&Tensor>),
        global_step: usize,
        take_norm: bool,
        world: Option<&World>,
    ) -> Result<Option<Tensor>, EngineError> {
        if let Some(scaler) = &mut self.scaler {
            scaler.begin_step();
            self.replicas.unscale(holders, scaler);
            if let Some(w) = world.filter(|w| w.size > 1 && self.replicas.shards_gradients()) {
                scaler.agree(w)?;
            }
        }
        let clip = self.settings.clip;
        let norm = match clip.is_some() || take_norm {
            true => Some(self.replicas.grad_norm(holders, clip, world)?),
            false => None,
        };
        for (i, &holder) in holders.iter().enumerate() {
            self.touching = Some(i);
            if self.settings.fault == Some((i, global_step)) {
                panic!("injected fault: the coordinator fails updating replica {i} at step {global_step}");
            }
            let device = self.replicas.devices()[i];
            let found_inf = self.scaler.as_ref().map(|s| s.found_inf_on(device));
            self.replicas.update(i, holder, lr, found_inf.as_ref());
        }
        self.touching = None;
        self.replicas.gather_shards(world)?;
        let taken = norm.map(|norm| {
            let (norm, counted) = match &self.scaler {
                // An overflowed step's norm (inf or NaN) is left out, on the device.
                Some(s) => {
                    let clean = s.clean().to_device(norm.device());
                    (norm.where_self(&clean, &norm.zeros_like()), clean.to_kind(norm.kind()))
                }
                None => (norm.shallow_clone(), norm.ones_like()),
            };
            Tensor::stack(&[norm, counted], 0)
        });
        if let Some(s) = &mut self.scaler {
            s.end_step();
        }
        self.replicas.share_buffers(world)?;
        self.replicas.update_ema();
        Ok(taken)
    }

    /// With one replica in the run and its steps graphed, the update's own CUDA graph.
    fn graphed(
        &mut self,
        mut graph: UpdateGraph,
        holders: &[usize],
        (lr, global_step): (f64, usize),
        report_norm: bool,
    ) -> Result<Applied, EngineError> {
        let device_lr = graph.lr(lr);
        let index = match self.first_device() {
            tch::Device::Cuda(i) => Some(i),
            _ => None,
        };
        let ran = graph.run(index, &mut || {
            let norm = self.apply(holders, (lr, Some(&device_lr)), global_step, true, None)?;
            norm.ok_or(EngineError::Invariant("the graphed update took no norm"))
        });
        self.graph = Some(graph);
        match ran? {
            Ok(norm) => {
                let grad_norm = (self.settings.clip.is_some() || report_norm).then_some(norm);
                Ok(Applied { grad_norm, uncaptured: None })
            }
            // The capture ran nothing: this update, and every one after, eagerly.
            Err(why) => {
                let grad_norm = self.apply(holders, (lr, None), global_step, report_norm, None)?;
                Ok(Applied { grad_norm, uncaptured: Some(why) })
            }
        }
    }

    /// The replica whose tensors a panic of this thread was touching.
    pub(super) fn touching(&self) -> Option<usize> {
        self.touching
    }

    /// What a host read of a value the step computed waits for (`phase`), with the step
    /// timeout as its deadline; see [`Waiting::fence`].
    pub(super) fn waiting(&self, phase: &str) -> Waiting {
        let (device, timeout) = self.settings.fence;
        crate::engine::clock::waiting(phase, device, timeout)
    }

    /// Whether replica 0's parameters are all finite: the fused check, read once the device has
    /// reached it (within the step timeout; an expired wait is the run's failure).
    pub(super) fn params_finite(&self) -> Result<bool, EngineError> {
        let found = self.replicas.non_finite_params();
        self.waiting("the weights' finiteness check").fence(found.device())?;
        Ok(finite(&found))
    }

    /// With `placement.check_replicas`, that every replica still equals replica 0 after
    /// `global_step` steps.
    pub(super) fn check_replicas(&self, global_step: usize) -> Result<(), EngineError> {
        if !self.settings.check_replicas {
            return Ok(());
        }
        let fence = self.waiting("the replicas' comparison");
        for &d in self.replicas.devices() {
            fence.fence(d)?;
        }
        match self.replicas.first_diverged() {
            Some(replica) => Err(EngineError::ReplicasDiverged { replica, step: global_step }),
            None => Ok(()),
        }
    }

    /// Puts the moving average's weights in every replica (for its evaluation) and returns the
    /// trained ones, for [`Update::put_back`]; none without a moving average.
    pub(super) fn swap_in_ema(&mut self) -> Result<Option<(Tensor, Tensor)>, EngineError> {
        self.writing()?;
        Ok(self.replicas.swap_in_ema())
    }

    /// Puts the trained weights [`Update::swap_in_ema`] took out back in every replica.
    pub(super) fn put_back(&mut self, own: (Tensor, Tensor)) {
        self.replicas.put_back(own);
    }

    /// Replica 0's tensors, optimizer state and moving average by name, held as `held` says:
    /// a checkpoint's (a collective where the state is split over `world`'s ranks:
    /// [`super::replicas::StateByName::tensors`]).
    pub(super) fn tensors(&self, held: Held, world: Option<&World>) -> Result<ReplicaTensors, EngineError> {
        self.replicas.by_name(world).tensors(held)
    }
}

#[cfg(test)]
mod tests;
