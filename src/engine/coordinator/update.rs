//! What the update touches: the replicas' tensors with their optimizer state, the dynamic loss
//! scaler's state on the device, and the replica being touched now (named if touching it
//! fails). A step's update is GradScaler's check of the reduced gradient, then clipping and the
//! optimizer's update of every replica at the step's lr; an overflowed step is skipped by the
//! fused kernels themselves (they read the check on the device), so no step reads the host.

use std::time::Duration;

use tch::Tensor;

use super::replicas::{Held, ReplicaTensors};
use super::{ModelLayout, Replicas};
use crate::device::gpu_wait::Waiting;
use crate::dist::World;
use crate::engine::optim::loss_scale::{finite, DeviceScaler};
use crate::engine::optim::OptimConfig;
use crate::engine::worker::ReplicaHandles;
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
}

/// A step's update done: where its norm was taken, `[the mean gradient's norm before clipping,
/// 1]` on the device (`[0, 0]` for an overflowed step, which the report leaves out).
pub(super) struct Applied {
    pub(super) grad_norm: Option<Tensor>,
}

pub(super) struct Update {
    settings: UpdateSettings,
    replicas: Replicas,
    /// Dynamic loss scaling's state (`precision.loss_scale`), on the first replica's device.
    scaler: Option<DeviceScaler>,
    /// The replica whose tensors this thread is touching now, to name it if that fails.
    touching: Option<usize>,
}

impl Update {
    pub(super) fn new(layout: ModelLayout, settings: UpdateSettings) -> Update {
        Update {
            replicas: Replicas::over(layout, settings.replicas),
            settings,
            scaler: None,
            touching: None,
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
    }

    /// Puts a checkpoint's (or a rewind point's) tensors in every replica and continues its
    /// loss scale and step count.
    pub(super) fn restore(&mut self, point: &Resume) {
        self.replicas.load(point);
        self.start(point.state.loss_scaler, point.state.global_step);
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

    /// A report window's loss-scale figures on the device, `[scale, steps skipped since the
    /// last call]` (no read; none without scaling).
    pub(super) fn scaler_figures(&mut self) -> Option<Tensor> {
        self.scaler.as_mut().map(DeviceScaler::report_figures)
    }

    /// Each replica's factor on its loss for a `batch`-sample step (the scale over the
    /// batch), computed once on the scaler's device (no host read) and copied device to
    /// device; none without scaling.
    pub(super) fn loss_factors(&self, batch: usize) -> Option<Vec<Tensor>> {
        self.scaler.as_ref().map(|s| {
            let factor = s.loss_factor(batch);
            self.replicas.devices().iter().map(|&d| factor.to_device(d)).collect()
        })
    }

    /// The update of a `batch`-sample step from the reduced gradient in the buffers `holders`
    /// name: GradScaler's check, clipping, the optimizer's update of every replica at `lr`
    /// (which an overflowed step leaves as it was, on the device), the loss scale moved,
    /// BatchNorm statistics shared (over `world`'s ranks too), the moving average. The norm is
    /// taken where clipping needs it, else only when `report_norm` asks (a report window's last
    /// step: a norm per step costs launches a step without clipping has no use for).
    pub(super) fn step(
        &mut self,
        holders: &[usize],
        (batch, lr, global_step): (usize, f64, usize),
        report_norm: bool,
        world: Option<&World>,
    ) -> Result<Applied, EngineError> {
        if let Some(scaler) = &mut self.scaler {
            scaler.begin_step();
            self.replicas.unscale(holders, scaler, batch);
            if let Some(w) = world.filter(|w| w.size > 1 && self.replicas.shards_gradients()) {
                scaler.agree(w)?;
            }
        }
        let clip = self.settings.clip;
        let norm = match clip.is_some() || report_norm {
            true => Some(self.replicas.grad_norm(holders, batch, clip, world)?),
            false => None,
        };
        for (i, &holder) in holders.iter().enumerate() {
            self.touching = Some(i);
            if self.settings.fault == Some((i, global_step)) {
                panic!("injected fault: the coordinator fails updating replica {i} at step {global_step}");
            }
            let device = self.replicas.devices()[i];
            let found_inf = self.scaler.as_ref().map(|s| s.found_inf_on(device));
            // Sharded, each replica divides only its own shard of a shared holder's sum.
            let divided = !self.replicas.sharded() && holders[..i].contains(&holder);
            self.replicas.update(i, holder, (lr, batch), divided, found_inf.as_ref());
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
        Ok(Applied { grad_norm: taken })
    }

    /// The replica whose tensors a panic of this thread was touching.
    pub(super) fn touching(&self) -> Option<usize> {
        self.touching
    }

    /// What a host read of a value the step computed waits for (`phase`), with the step
    /// timeout as its deadline; see [`Waiting::fence`].
    fn fence(&self, phase: &str) -> Waiting {
        let (device, timeout) = self.settings.fence;
        crate::engine::clock::waiting(phase, device, timeout)
    }

    /// Whether replica 0's parameters are all finite: the fused check, read once the device has
    /// reached it (within the step timeout; an expired wait is the run's failure).
    pub(super) fn params_finite(&self) -> Result<bool, EngineError> {
        let found = self.replicas.non_finite_params();
        self.fence("the weights' finiteness check").fence(found.device())?;
        Ok(finite(&found))
    }

    /// With `placement.check_replicas`, that every replica still equals replica 0 after
    /// `global_step` steps.
    pub(super) fn check_replicas(&self, global_step: usize) -> Result<(), EngineError> {
        if !self.settings.check_replicas {
            return Ok(());
        }
        let fence = self.fence("the replicas' comparison");
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
    pub(super) fn swap_in_ema(&mut self) -> Option<(Tensor, Tensor)> {
        self.replicas.swap_in_ema()
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
mod tests {
    use super::*;
    use dpt_core::optim::Zero;

    /// An update over one replica of two parameters on the CPU, without handles from a worker.
    fn update(scaling: Option<LossScaling>) -> Update {
        let layout = ModelLayout::of_params(&[&[2], &[1]]);
        let settings = UpdateSettings {
            optimizer: OptimConfig::sgd(0.5, 0.0, 0.0),
            scaling,
            clip: None,
            ema: None,
            check_replicas: true,
            fence: (DeviceId::Cpu, Duration::from_secs(5)),
            fault: None,
            replicas: (0, 1),
        };
        let optimizer = settings.optimizer;
        let mut u = Update::new(layout, settings);
        let (params, buffers) =
            (Tensor::from_slice(&[1.0f32, 2.0, 3.0]), Tensor::zeros([0], tch::kind::FLOAT_CPU));
        u.replicas.add_flat(params, buffers, optimizer);
        u
    }

    #[test]
    fn an_overflowed_step_changes_nothing_and_counts_as_skipped() {
        let mut u = update(Some(LossScaling::default()));
        u.begin();
        let before = u.replicas.by_name(None).tensors(Held::Copies).unwrap().params;
        u.replicas().grad(0).copy_(&Tensor::from_slice(&[f32::INFINITY, 0.0, 0.0]));
        let applied = u.step(&[0], (1, 0.1, 0), true, None).unwrap();
        let taken = Vec::<f64>::try_from(&applied.grad_norm.expect("asked for")).unwrap();
        assert_eq!(taken, [0.0, 0.0], "an overflowed step's norm is left out");
        let after = u.replicas.by_name(None).tensors(Held::Copies).unwrap().params;
        assert!(before.iter().zip(&after).all(|(a, b)| a.1.equal(&b.1)), "weights unchanged");
        let figures = |u: &mut Update| Vec::<f64>::try_from(&u.scaler_figures().unwrap()).unwrap();
        assert_eq!(figures(&mut u), [f64::from(LossScaling::default().init / 2.0), 1.0]);
        assert_eq!(figures(&mut u)[1], 0.0, "reported once");
        let scale = u.scaler_state().map(|s| s.scale);
        assert_eq!(scale, Some(LossScaling::default().init / 2.0), "the scale backs off");
    }

    #[test]
    fn a_clean_step_moves_the_weights_and_the_check_finds_them_finite() {
        let mut u = update(None);
        u.begin();
        u.replicas().grad(0).copy_(&Tensor::from_slice(&[1.0f32, 1.0, 2.0]));
        let applied = u.step(&[0], (2, 0.5, 0), true, None).unwrap();
        // The mean gradient (sum over 2 samples) is (0.5, 0.5, 1), its norm sqrt(1.5).
        let taken = applied.grad_norm.expect("asked for");
        assert!((taken.double_value(&[0]) - 1.5f64.sqrt()).abs() < 1e-6);
        assert_eq!(taken.double_value(&[1]), 1.0, "one norm counted");
        let w: Vec<f32> =
            Vec::try_from(u.replicas.by_name(None).tensors(Held::Copies).unwrap().params[0].1.flatten(0, -1))
                .unwrap();
        assert_eq!(w, [0.75, 1.75], "plain SGD: w - lr * mean gradient");
        assert!(u.params_finite().unwrap());
        assert!(u.check_replicas(1).is_ok(), "one replica equals itself");
        assert!(u.scaler_figures().is_none(), "nothing skipped without scaling");
    }

    /// A rewind point holding `t`, as a checkpoint of it reads back.
    fn point_of(t: ReplicaTensors) -> Resume {
        let flat = |named: &[(String, Tensor)]| {
            Tensor::cat(&named.iter().map(|(_, t)| t.reshape([-1])).collect::<Vec<_>>(), 0)
        };
        let settings = dpt_core::settings::Settings::default();
        let normalization = settings.model_kind().normalization();
        Resume {
            state: crate::persist::checkpoint::CheckpointState::new(settings, normalization),
            params: flat(&t.params),
            optimizer: t.optimizer.iter().map(|(slot, l)| (slot.clone(), flat(l))).collect(),
            buffers: Tensor::zeros([0], tch::kind::FLOAT_CPU),
            ema: None,
            then: crate::persist::resume::Continuation::default(),
        }
    }

    /// `n` CPU replicas of three parameters (8 values, so that 3 shards split tensors) under
    /// AdamW with weight decay, the optimizer state whole or split by `zero`.
    fn replicated(zero: dpt_core::optim::Zero, n: usize) -> Update {
        let layout = ModelLayout::of_params(&[&[3], &[2, 2], &[1]]);
        let optimizer = OptimConfig {
            kind: dpt_core::optim::OptimizerKind::AdamW,
            weight_decay: 0.1,
            zero,
            ..OptimConfig::sgd(0.01, 0.0, 0.0)
        };
        let settings = UpdateSettings {
            optimizer,
            scaling: None,
            clip: Some(1.0),
            ema: None,
            check_replicas: true,
            fence: (DeviceId::Cpu, Duration::from_secs(5)),
            fault: None,
            replicas: (0, n),
        };
        let mut u = Update::new(layout, settings);
        for _ in 0..n {
            let params = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25, -0.75, 1.5, 3.0, -2.0]);
            u.replicas.add_flat(params, Tensor::zeros([0], tch::kind::FLOAT_CPU), optimizer);
        }
        u.begin();
        u
    }

    #[test]
    fn a_sharded_optimizer_state_ends_with_the_weights_and_state_of_the_whole_one() {
        let (mut whole, mut sharded) = (replicated(Zero::Off, 3), replicated(Zero::States, 3));
        assert!(!whole.replicas.sharded() && sharded.replicas.sharded());
        assert_eq!(sharded.replicas.state_bytes().optimizer, 2 * 3 * 4, "two moments of the largest shard");
        assert_eq!(whole.replicas.state_bytes().optimizer, 2 * 8 * 4);
        assert_eq!(sharded.replicas.state_bytes().optimizer_shards, 3);
        assert_eq!(sharded.replicas.state_bytes().weights, 8 * 4, "the weights stay whole");
        for step in 0..4 {
            for u in [&mut whole, &mut sharded] {
                for i in 0..3 {
                    let g: Vec<f32> = (0..8).map(|k| ((k * 7 + step * 3) % 5) as f32 - 2.0).collect();
                    u.replicas().grad(i).copy_(&Tensor::from_slice(&g));
                }
                u.step(&[0, 1, 2], (4, 0.01, step as usize), false, None).unwrap();
            }
            assert!(
                sharded.check_replicas(step as usize).is_ok(),
                "every replica holds the gathered weights"
            );
        }
        let (a, b) =
            (whole.tensors(Held::Copies, None).unwrap(), sharded.tensors(Held::Copies, None).unwrap());
        let same = |x: &[(String, Tensor)], y: &[(String, Tensor)]| {
            x.len() == y.len() && x.iter().zip(y).all(|((n, t), (m, u))| n == m && t.equal(u))
        };
        assert!(same(&a.params, &b.params), "bit-equal weights");
        assert_eq!(a.optimizer.len(), 2);
        for ((slot, x), (other, y)) in a.optimizer.iter().zip(&b.optimizer) {
            assert_eq!(slot, other);
            assert!(same(x, y), "the gathered {slot} equals the whole one");
        }
        // A checkpoint of the sharded run restores into the whole one and back.
        let point = point_of(b);
        whole.restore(&point);
        sharded.restore(&point);
        let (c, d) =
            (whole.tensors(Held::Copies, None).unwrap(), sharded.tensors(Held::Copies, None).unwrap());
        assert!(c.optimizer.iter().zip(&d.optimizer).all(|((_, x), (_, y))| same(x, y)));
    }
}
