//! Every learning-rate schedule against the `torch.optim.lr_scheduler` classes it follows
//! (`tests/scripts/schedule_reference.py`), and a run's reported lr following its schedule.

use crate::common;

use dpt_core::device::DeviceId;
use dpt_tui::engine::optim::schedule::{Schedule, Shape};
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{Engine, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::record::Record;

const TOTAL: usize = 60;
const PER_EPOCH: usize = 12;

fn pytorch(shape: &str, lr: f64, warmup: usize, min_lr: f64, milestones: &[usize]) -> Vec<f64> {
    let spec = serde_json::json!({
        "shape": shape, "lr": lr, "warmup": warmup, "total": TOTAL, "min_lr": min_lr,
        "gamma": 0.1, "milestones": milestones, "steps_per_epoch": PER_EPOCH,
    });
    let out = common::run_script("schedule_reference.py", &[spec.to_string()]);
    assert!(out.status.success(), "schedule_reference.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(spec: &str, warmup: usize, min_lr: f64) {
    let shape: Shape = spec.parse().unwrap();
    let milestones = match &shape {
        Shape::Step { milestones } => milestones.clone(),
        _ => Vec::new(),
    };
    let name = spec.split(':').next().unwrap();
    let theirs = pytorch(name, 0.4, warmup, min_lr, &milestones);
    let s = Schedule { shape, warmup_steps: warmup, min_lr, gamma: 0.1 };
    s.check(0.4, TOTAL).unwrap();
    for (t, want) in theirs.iter().enumerate() {
        let ours = s.lr_at(0.4, t, TOTAL, PER_EPOCH);
        assert!(
            (ours - want).abs() <= 1e-9 * want.abs().max(1e-3),
            "{spec} warm-up {warmup}, step {t}: {ours} vs PyTorch's {want}"
        );
    }
}

#[test]
fn constant_with_and_without_warm_up_equals_pytorch() {
    check("constant", 0, 0.0);
    check("constant", 7, 0.0);
}

#[test]
fn cosine_equals_cosine_annealing_lr_after_a_linear_warm_up() {
    check("cosine", 0, 0.0);
    check("cosine", 10, 0.004);
}

#[test]
fn linear_equals_linear_lr() {
    check("linear", 0, 0.01);
    check("linear", 5, 0.0);
}

#[test]
fn step_equals_multi_step_lr() {
    check("step:2,4", 0, 0.0);
    check("step:1,3", 6, 0.0);
}

#[test]
fn onecycle_equals_one_cycle_lr() {
    check("onecycle", 0, 0.0);
    check("onecycle", 12, 0.0);
}

#[test]
fn a_run_reports_the_scheduled_lr_at_every_step() {
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    cfg.settings.recipe.batch_size = 32;
    cfg.settings.recipe.epochs = 2;
    cfg.settings.placement.log_every = 1;
    cfg.settings.optimizer = OptimConfig::sgd(0.1, 0.0, 0.0);
    cfg.settings.schedule = Schedule { shape: Shape::Cosine, warmup_steps: 3, min_lr: 0.001, gamma: 0.1 };
    let plan = cfg.lr_plan(128);
    let engine = Engine::start(cfg, common::subset(128, 32)).unwrap();
    let mut seen = Vec::new();
    for r in engine.events().iter() {
        if let Record::Step(s) = r {
            seen.push((s.global_step, s.lr));
        }
    }
    engine.join().unwrap();
    assert_eq!(seen.len(), 8);
    for (after, lr) in seen {
        // A report after step n shows the rate step n - 1 trained with.
        assert_eq!(lr, plan.at(after - 1), "after {after} steps");
    }
}
