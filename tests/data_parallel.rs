//! The data-parallel invariant: k replicas fed the same global batches end with the parameters
//! one replica reaches, and stay identical to each other after every step.

mod common;

use dpt_core::device::DeviceId;
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{Engine, FinishReason, Outcome, TrainConfig};
use dpt_tui::model::{self, ModelKind};
use tch::Kind;

fn train(model: ModelKind, replicas: usize, steps: usize, sgd: OptimConfig) -> Outcome {
    let mut cfg = TrainConfig::new(model, vec![DeviceId::Cpu; replicas]);
    cfg.settings.recipe.batch_size = 96;
    cfg.settings.optimizer = sgd;
    cfg.settings.recipe.seed = 11;
    cfg.settings.placement.max_steps = Some(steps);
    cfg.settings.placement.check_replicas = true;
    // 300 samples in batches of 96: the 4th step of each epoch is a partial batch of 12.
    let engine = Engine::start(cfg, common::subset(300, 100)).expect("engine starts");
    for _ in engine.events().iter() {}
    let outcome = engine.join().expect("training succeeds with identical replicas");
    assert_eq!(outcome.summary.reason, FinishReason::StepLimit);
    assert_eq!(outcome.summary.global_steps, steps);
    outcome
}

#[test]
fn lenet_on_two_and_three_replicas_matches_one_replica() {
    let sgd = OptimConfig::sgd(0.2, 0.9, 5e-3);
    let steps = 6;
    let one = train(ModelKind::Lenet, 1, steps, sgd);
    let initial = {
        let mut b = dpt_tui::model::Builder::default();
        model::build(ModelKind::Lenet, &mut b);
        tch::manual_seed(11);
        dpt_tui::engine::flat::initial_flat(&b.params)
    };
    let trained: Vec<tch::Tensor> = one.final_params.iter().map(|(_, t)| t.reshape([-1])).collect();
    let moved = (tch::Tensor::cat(&trained, 0) - initial).abs().max().double_value(&[]);
    assert!(moved > 1e-4, "training must move the parameters (moved {moved})");
    for replicas in [2, 3] {
        let many = train(ModelKind::Lenet, replicas, steps, sgd);
        let rel = common::max_relative_difference(&one, &many);
        assert!(rel < 1e-4, "{replicas} replicas differ from one by {rel}");
    }
}

#[test]
fn plain_sgd_matches_too() {
    let sgd = OptimConfig::sgd(0.2, 0.0, 0.0);
    let one = train(ModelKind::Lenet, 1, 4, sgd);
    let two = train(ModelKind::Lenet, 2, 4, sgd);
    assert!(common::max_relative_difference(&one, &two) < 1e-4);
}

#[test]
fn batchnorm_and_dropout_replicas_stay_identical() {
    // check_replicas fails the run if any replica's parameters or BatchNorm statistics differ
    // from replica 0's after a step; per-replica dropout streams must not break that.
    let sgd = OptimConfig::sgd(0.05, 0.5, 0.0);
    let out = train(ModelKind::MnistNet, 2, 3, sgd);
    assert!(out.final_params.iter().all(|(_, t)| bool::try_from(t.isfinite().all()).unwrap()));
    let out = train(ModelKind::Resnet18, 2, 1, OptimConfig::sgd(0.1, 0.0, 0.0));
    let mean = out.final_params.iter().find(|(n, _)| n == "stem.bn.running_mean").expect("buffer saved");
    assert!(mean.1.abs().sum(Kind::Double).double_value(&[]) > 0.0, "running statistics were updated");
}

#[test]
fn same_seed_same_result() {
    let sgd = OptimConfig::sgd(0.01, 0.5, 0.0);
    let a = train(ModelKind::MnistNet, 2, 3, sgd);
    let b = train(ModelKind::MnistNet, 2, 3, sgd);
    assert_eq!(common::max_relative_difference(&a, &b), 0.0, "dropout streams and shuffles are seeded");
}

#[test]
fn cpu_steps_are_timed_by_the_host_clock_every_step_and_say_so() {
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    // Three warm-up steps, then one timed step in each of the last two windows.
    (cfg.settings.recipe.batch_size, cfg.settings.placement.max_steps, cfg.settings.placement.log_every) =
        (32, Some(7), 2);
    let engine = Engine::start(cfg, common::subset(300, 100)).expect("engine starts");
    let records: Vec<_> = engine.events().iter().collect();
    engine.join().expect("training succeeds");
    let Some(dpt_tui::record::Record::Start(info)) = records.first() else { panic!("no start record") };
    assert_eq!(info.timing, "host clock, every step after 3 warm-up steps");
    let steps: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            dpt_tui::record::Record::Step(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[0].timed_steps, Some(0), "the warm-up is not timed");
    for s in &steps[2..] {
        // Every phase was measured, and the forward/backward pass is real work.
        assert!(
            s.timing.compute > 0.0 && s.timing.allreduce > 0.0 && s.timing.update > 0.0,
            "{:?}",
            s.timing
        );
        assert!(s.replicas.iter().all(|r| r.compute > 0.0), "{:?}", s.replicas);
    }
}
