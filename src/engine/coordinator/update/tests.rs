//! The tests of `update.rs`.

use super::*;
use crate::device::landing::Landing;
use dpt_core::optim::Zero;

/// `values` (the tensors back to back) laid out as `layout` places them, pads included.
fn laid(layout: &crate::engine::flat::Layout, values: &[f32]) -> Tensor {
    let flat = Tensor::zeros([layout.total()], tch::kind::FLOAT_CPU);
    layout.load_logical(&flat, &Tensor::from_slice(values));
    flat
}

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
        graph: None,
    };
    let optimizer = settings.optimizer;
    let params = laid(&layout.params, &[1.0, 2.0, 3.0]);
    let mut u = Update::new(layout, settings);
    let buffers = Tensor::zeros([0], tch::kind::FLOAT_CPU);
    u.replicas.add_flat(params, buffers, optimizer);
    u
}

#[test]
fn an_overflowed_step_changes_nothing_and_counts_as_skipped() {
    let mut u = update(Some(LossScaling::default()));
    u.begin();
    let before = u.replicas.by_name(None).tensors(Held::Landed(&Landing::new())).unwrap().params;
    let grad = laid(&ModelLayout::of_params(&[&[2], &[1]]).params, &[f32::INFINITY, 0.0, 0.0]);
    u.replicas().grad(0).copy_(&grad);
    let applied = u.step(&[0], (0.1, 0), true, None).unwrap();
    let taken = Vec::<f64>::try_from(&applied.grad_norm.expect("asked for")).unwrap();
    assert_eq!(taken, [0.0, 0.0], "an overflowed step's norm is left out");
    let after = u.replicas.by_name(None).tensors(Held::Landed(&Landing::new())).unwrap().params;
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
    // The mean gradient the workers' divided losses give.
    let grad = laid(&ModelLayout::of_params(&[&[2], &[1]]).params, &[0.5, 0.5, 1.0]);
    u.replicas().grad(0).copy_(&grad);
    let applied = u.step(&[0], (0.5, 0), true, None).unwrap();
    // Its norm is sqrt(1.5).
    let taken = applied.grad_norm.expect("asked for");
    assert!((taken.double_value(&[0]) - 1.5f64.sqrt()).abs() < 1e-6);
    assert_eq!(taken.double_value(&[1]), 1.0, "one norm counted");
    let w: Vec<f32> =
        Vec::try_from(u.replicas.by_name(None).tensors(Held::Landed(&Landing::new())).unwrap().params[0].1.flatten(0, -1))
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
        graph: None,
    };
    let values = laid(&layout.params, &[0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 3.0, -2.0]);
    let mut u = Update::new(layout, settings);
    for _ in 0..n {
        let params = values.copy();
        u.replicas.add_flat(params, Tensor::zeros([0], tch::kind::FLOAT_CPU), optimizer);
    }
    u.begin();
    u
}

#[test]
fn a_sharded_optimizer_state_ends_with_the_weights_and_state_of_the_whole_one() {
    let (mut whole, mut sharded) = (replicated(Zero::Off, 3), replicated(Zero::States, 3));
    assert!(!whole.replicas.sharded() && sharded.replicas.sharded());
    // Three tensors at offsets 0, 64 and 128 of 192 scalars, a shard of 64 each.
    assert_eq!(sharded.replicas.state_bytes().optimizer, 2 * 64 * 4, "two moments of the largest shard");
    assert_eq!(whole.replicas.state_bytes().optimizer, 2 * 192 * 4);
    assert_eq!(sharded.replicas.state_bytes().optimizer_shards, 3);
    assert_eq!(sharded.replicas.state_bytes().weights, 192 * 4, "the weights stay whole");
    for step in 0..4 {
        for u in [&mut whole, &mut sharded] {
            for i in 0..3 {
                let g: Vec<f32> = (0..8).map(|k| ((k * 7 + step * 3) % 5) as f32 - 2.0).collect();
                let g = laid(&ModelLayout::of_params(&[&[3], &[2, 2], &[1]]).params, &g);
                u.replicas().grad(i).copy_(&g);
            }
            u.step(&[0, 1, 2], (0.01, step as usize), false, None).unwrap();
        }
        assert!(
            sharded.check_replicas(step as usize).is_ok(),
            "every replica holds the gathered weights"
        );
    }
    let (a, b) =
        (whole.tensors(Held::Landed(&Landing::new()), None).unwrap(), sharded.tensors(Held::Landed(&Landing::new()), None).unwrap());
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
    whole.restore(&point).unwrap();
    sharded.restore(&point).unwrap();
    let (c, d) =
        (whole.tensors(Held::Landed(&Landing::new()), None).unwrap(), sharded.tensors(Held::Landed(&Landing::new()), None).unwrap());
    assert!(c.optimizer.iter().zip(&d.optimizer).all(|((_, x), (_, y))| same(x, y)));
}

#[test]
fn clipping_a_gradient_that_is_not_a_number_leaves_the_pads_between_tensors_zero() {
    let mut u = replicated(Zero::Off, 1);
    let layout = ModelLayout::of_params(&[&[3], &[2, 2], &[1]]).params;
    u.replicas().grad(0).copy_(&laid(&layout, &[f32::NAN; 8]));
    u.step(&[0], (0.01, 0), true, None).unwrap();
    // The next backward pass writes the tensors' gradients only: a NaN left in a pad would
    // make every later norm NaN.
    let pads = u.replicas().grad(0).narrow(0, 3, 61);
    assert_eq!(pads.abs().sum(tch::Kind::Double).double_value(&[]), 0.0);
}
