//! The warm-up steps of a process are left out of the step timings and the straggler check,
//! in the records a run writes (the clock's own rules are unit-tested in `engine::clock`).

use crate::common;

use dpt_core::device::DeviceId;
use dpt_tui::engine::clock::WARMUP_STEPS;
use dpt_tui::engine::{Engine, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::record::{Change, Record};

#[test]
fn warm_up_windows_carry_no_timings_and_later_windows_do() {
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    cfg.settings.recipe.batch_size = 32;
    cfg.settings.recipe.epochs = 1;
    cfg.settings.placement.log_every = 1;
    // Replica 1 is slow on every step: it must be named once, from a timed window only.
    cfg.kit.faults = "slow-replica=1@80".parse().unwrap();
    let engine = Engine::start(cfg, common::subset(256, 32)).unwrap();
    let (mut steps, mut stragglers, mut timing) = (Vec::new(), Vec::new(), String::new());
    for r in engine.events().iter() {
        match r {
            Record::Start(info) => timing = info.timing.clone(),
            Record::Step(s) => steps.push(*s),
            Record::Event(Change::Straggler { global_step, .. }) => stragglers.push(global_step),
            _ => {}
        }
    }
    engine.join().unwrap();
    assert_eq!(timing, format!("host clock, every step after {WARMUP_STEPS} warm-up steps"));
    assert_eq!(steps.len(), 8);
    for s in &steps[..WARMUP_STEPS] {
        assert_eq!(s.timed_steps, Some(0), "step {}", s.global_step);
        assert_eq!(s.timing.total(), 0.0, "warm-up time is not averaged in");
        assert!(s.replicas.iter().all(|r| r.data + r.compute == 0.0));
    }
    for s in &steps[WARMUP_STEPS..] {
        assert_eq!(s.timed_steps, Some(1), "step {}", s.global_step);
        let step = |r: usize| s.replicas[r].data + s.replicas[r].compute;
        // Half the injected 80 ms: room for the other replica to be held up by the machine.
        assert!(step(1) > step(0) + 0.04, "replica 1 is the slow one: {} against {}", step(1), step(0));
    }
    assert_eq!(stragglers, vec![WARMUP_STEPS + 1], "named once, at the first timed window");
}

/// What a record says, without its clock's figures.
fn said(r: &Record) -> String {
    match r {
        Record::Start(_) => "start".into(),
        Record::Step(s) => format!(
            "step {} e{} s{} loss {} acc {} norm {:?}",
            s.global_step, s.epoch, s.step, s.loss, s.acc, s.grad_norm
        ),
        Record::Epoch(e) => format!(
            "epoch {} train {} {} test {} {}",
            e.epoch, e.train_loss, e.train_acc, e.test_loss, e.test_acc
        ),
        Record::Event(Change::Snapshot { global_step, loss, .. }) => {
            format!("point {global_step} loss {loss:?}")
        }
        Record::Event(c) => format!("{c:?}"),
        Record::Summary(s) => format!("summary {} {:?} {:?}", s.global_steps, s.reason, s.test_acc),
        Record::Eval(_) => "eval".into(),
    }
}

/// A GPU run reads each report window's figures a window later (no drain); the `late-report`
/// fault makes a CPU run do the same. Its records are the records of a run that reports at
/// once, in the same order: windows cut by an epoch's end, rewind points that name the last
/// loss, an evaluation, a step limit that ends the run inside a window.
#[test]
fn a_run_that_reports_each_window_later_records_what_one_reporting_at_once_does() {
    let run = |faults: &str| {
        let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
        cfg.settings.recipe.batch_size = 32;
        cfg.settings.recipe.epochs = 2;
        cfg.settings.placement.log_every = 3;
        cfg.settings.placement.max_steps = Some(13);
        cfg.settings.checkpoints.snapshot_every = dpt_core::checkpoint_every::CheckpointEvery::Steps(4);
        cfg.kit.faults = faults.parse().unwrap();
        let engine = Engine::start(cfg, common::subset(256, 64)).unwrap();
        // A straggler is the machine's timing, not the run's: two runs on a busy machine differ.
        let said: Vec<String> = engine
            .events()
            .iter()
            .filter(|r| !matches!(r, Record::Event(Change::Straggler { .. })))
            .map(|r| said(&r))
            .collect();
        engine.join().unwrap();
        said
    };
    let (now, later) = (run(""), run("late-report"));
    assert_eq!(now, later);
    let windows = now.iter().filter(|r| r.starts_with("step ")).count();
    // Epoch 1: steps 3, 6, 8 (its end); epoch 2: 11, then 13 (the limit, inside a window).
    assert_eq!(windows, 5, "{now:#?}");
    assert!(now.iter().any(|r| r.starts_with("point 4 loss Some(")), "{now:#?}");
}

/// A run that fails still records the window it closed before the failure, reported later or not.
#[test]
fn a_failed_run_reporting_windows_later_still_records_the_last_window_closed() {
    let run = |faults: &str| {
        let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
        cfg.settings.recipe.batch_size = 32;
        cfg.settings.placement.log_every = 3;
        cfg.kit.faults = faults.parse().unwrap();
        let engine = Engine::start(cfg, common::subset(256, 64)).unwrap();
        let said: Vec<String> = engine
            .events()
            .iter()
            .filter(|r| matches!(r, Record::Step(_) | Record::Event(Change::Failed { .. })))
            .map(|r| said(&r))
            .collect();
        assert!(engine.join().is_err(), "replica 1 fails at step 7");
        said
    };
    let now = run("worker-panic=1@7");
    assert_eq!(now.iter().filter(|r| r.starts_with("step ")).count(), 2, "{now:#?}");
    assert_eq!(now, run("worker-panic=1@7,late-report"));
}
