//! Nothing lost: checkpoints, exact resume, failed writes, divergence, failing and stuck
//! replicas, through the engine API with test-only fault injection.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use dpt_core::device::DeviceId;
use dpt_tui::engine::faults::Faults;
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{
    Control, Engine, EngineError, FinishReason, OnNan, Outcome, Record, Resume, TrainConfig,
};
use dpt_tui::model::ModelKind;
use dpt_tui::persist::checkpoint::{Checkpoint, CHECKPOINT_FILE};
use dpt_tui::record::Change;

/// 600 samples in batches of 100: 6 steps an epoch.
fn config(dir: &Path) -> TrainConfig {
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    cfg.settings.recipe.epochs = 2;
    cfg.settings.recipe.batch_size = 100;
    cfg.settings.optimizer = OptimConfig::sgd(0.1, 0.9, 1e-3);
    cfg.settings.recipe.seed = 5;
    cfg.settings.placement.log_every = 4;
    cfg.run_dir = Some(dir.to_owned());
    cfg
}

fn run(cfg: TrainConfig) -> (Result<Outcome, EngineError>, Vec<Record>) {
    let engine = Engine::start(cfg, common::subset(600, 100)).expect("engine starts");
    let events: Vec<Record> = engine.events().iter().collect();
    (engine.join(), events)
}

fn resume_cfg(dir: &Path) -> TrainConfig {
    let ckpt = Checkpoint::read(dir).expect("a checkpoint was written");
    let mut cfg = config(dir);
    cfg.kit.resume =
        Some(Box::new(Resume::new(ckpt, ModelKind::Lenet, None, &dir.join(CHECKPOINT_FILE)).unwrap()));
    cfg
}

fn max_abs_diff(a: &Outcome, b: &Outcome) -> f64 {
    a.final_params
        .iter()
        .zip(&b.final_params)
        .map(|((_, x), (_, y))| (x - y).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

#[test]
fn stop_and_resume_gives_the_same_parameters_as_a_straight_run() {
    let straight_dir = tempfile::tempdir().unwrap();
    let (straight, _) = run(config(straight_dir.path()));
    let straight = straight.unwrap();
    // Stopped at the epoch boundary (step 6) and in the middle of epoch 2 (step 9).
    for stop_at in [6, 9] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        cfg.settings.placement.max_steps = Some(stop_at);
        let (first, _) = run(cfg);
        assert_eq!(first.unwrap().summary.reason, FinishReason::StepLimit);
        let (resumed, events) = run(resume_cfg(dir.path()));
        let resumed = resumed.unwrap();
        assert_eq!(resumed.summary.reason, FinishReason::Completed);
        assert_eq!(resumed.summary.global_steps, 12);
        assert_eq!(max_abs_diff(&straight, &resumed), 0.0, "stopped at {stop_at}: parameters differ");
        // The resumed run says where it continues from (its history is the run's metrics.jsonl).
        let at = events.iter().find_map(|e| match e {
            Record::Event(Change::Restored { global_step, .. }) => Some(*global_step),
            _ => None,
        });
        assert_eq!(at, Some(stop_at));
        let epoch2 = events
            .iter()
            .find_map(|e| if let Record::Epoch(s) = e { Some(s.clone()) } else { None })
            .unwrap();
        assert_eq!(epoch2.epoch, 2);
    }
}

#[test]
fn a_checkpoint_holds_the_whole_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.recipe.epochs = 50;
    cfg.settings.placement.log_every = 1;
    let engine = Engine::start(cfg, common::subset(600, 100)).unwrap();
    let controls = engine.controls();
    let mut set = false;
    for e in engine.events().iter() {
        if let Record::Step(s) = &e {
            if !set {
                controls.send(Control::SetLr { lr: 0.03 }).unwrap();
                set = true;
            } else if s.global_step >= 3 {
                controls.send(Control::Stop).unwrap();
            }
        }
    }
    let outcome = engine.join().unwrap();
    let ckpt = Checkpoint::read(dir.path()).unwrap();
    let s = &ckpt.state;
    assert_eq!(s.model(), dpt_tui::model::ModelKind::Lenet);
    assert_eq!(s.lr, 0.03, "the lr as the user changed it");
    assert_eq!(s.global_step, outcome.summary.global_steps);
    assert_eq!((s.epoch, s.step), (s.global_step / 6, s.global_step % 6));
    assert_eq!(s.settings.recipe.seed, 5);
    assert_eq!(ckpt.params.len(), 8);
    let (slot, momentum) = &ckpt.optimizer[0];
    assert_eq!((slot.as_str(), momentum.len()), ("momentum", 8));
    let moved: f64 = momentum.iter().map(|(_, t)| t.abs().sum(tch::Kind::Double).double_value(&[])).sum();
    assert!(moved > 0.0, "momentum buffers are saved");
    // The weights file matches the checkpoint's parameters.
    let weights = tch::Tensor::read_safetensors(dir.path().join("model.safetensors")).unwrap();
    for (name, t) in &weights {
        let (_, c) = ckpt.params.iter().find(|(n, _)| n == name).unwrap();
        assert!(t.equal(c), "{name}");
    }
}

#[test]
fn batchnorm_statistics_are_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig::new(ModelKind::Resnet18, vec![DeviceId::Cpu]);
    cfg.settings.recipe.batch_size = 32;
    cfg.settings.placement.max_steps = Some(1);
    cfg.run_dir = Some(dir.path().to_owned());
    let engine = Engine::start(cfg, common::subset(64, 10)).unwrap();
    for _ in engine.events().iter() {}
    engine.join().unwrap();
    let ckpt = Checkpoint::read(dir.path()).unwrap();
    assert_eq!(ckpt.buffers.len(), 34);
    let mean = &ckpt.buffers.iter().find(|(n, _)| n == "stem.bn.running_mean").unwrap().1;
    assert!(mean.abs().sum(tch::Kind::Double).double_value(&[]) > 0.0);
}

#[test]
fn a_failed_checkpoint_write_is_reported_and_keeps_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.recipe.epochs = 1;
    run(cfg).0.unwrap();
    let path = dir.path().join(CHECKPOINT_FILE);
    let before = std::fs::read(&path).unwrap();
    let mut cfg = resume_cfg(dir.path());
    cfg.settings.recipe.epochs = 3;
    cfg.kit.faults = Faults { checkpoint_write: true, ..Faults::default() };
    let (outcome, events) = run(cfg);
    // A failed periodic checkpoint is a warning and training goes on; the final save failing
    // too (no retries in this configuration) fails the run rather than ending it as done.
    assert!(events.iter().any(|e| matches!(e, Record::Epoch(s) if s.epoch == 3)), "training went on");
    assert!(matches!(outcome, Err(EngineError::Checkpoint(_))), "{:?}", outcome.err());
    assert!(events.iter().any(|e| matches!(e, Record::Event(Change::SaveFailed { .. }))));
    assert!(!events.iter().any(|e| matches!(e, Record::Summary(_))), "no summary: the run is not done");
    let warnings: Vec<&String> = events
        .iter()
        .filter_map(|e| if let Record::Event(Change::Warning { message }) = e { Some(message) } else { None })
        .collect();
    assert!(warnings
        .iter()
        .any(|w| w.contains("cannot write checkpoint") && w.contains("previous checkpoint is intact")));
    assert_eq!(std::fs::read(&path).unwrap(), before, "the previous checkpoint is untouched");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no half-written file");
}

#[test]
fn a_nan_loss_stops_and_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.recipe.epochs = 5;
    cfg.on_nan = OnNan::Stop;
    cfg.kit.faults = Faults { nan_loss_from: Some(8), ..Faults::default() };
    let (outcome, events) = run(cfg);
    assert_eq!(outcome.unwrap().summary.reason, FinishReason::Diverged);
    assert!(events.iter().any(|e| matches!(e, Record::Event(Change::NotFinite { then: OnNan::Stop, .. }))));
    let ckpt = Checkpoint::read(dir.path()).unwrap();
    assert_eq!(ckpt.state.global_step, 6, "the epoch-1 checkpoint stays");
    assert!(ckpt.params.iter().all(|(_, t)| bool::try_from(t.isfinite().all()).unwrap()));
}

#[test]
fn a_loss_first_not_finite_in_the_last_partial_window_skips_the_final_save() {
    // 600 samples in batches of 100: 6 steps an epoch, reported every 4 and at the epoch's end.
    // The run stops at its step limit of 9: steps 7 to 9 make the partial window its end
    // reports, and the loss is not finite from the 8th step on (global step 7). The run has
    // diverged: no final save is tried, and the epoch-1 checkpoint stays.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.on_nan = OnNan::Stop;
    cfg.settings.placement.max_steps = Some(9);
    cfg.kit.faults = Faults { nan_loss_from: Some(7), ..Faults::default() };
    let (outcome, events) = run(cfg);
    assert_eq!(outcome.unwrap().summary.reason, FinishReason::Diverged);
    let said =
        |want: &dyn Fn(&Change) -> bool| events.iter().any(|e| matches!(e, Record::Event(c) if want(c)));
    assert!(said(&|c| matches!(c, Change::NotFinite { global_step: 9, then: OnNan::Stop })));
    assert!(
        !said(&|c| matches!(c, Change::Warning { message } if message.contains("not saved"))),
        "no save of the bad weights is tried"
    );
    assert!(!said(&|c| matches!(c, Change::Saved { global_step: 9, .. })));
    let ckpt = Checkpoint::read(dir.path()).unwrap();
    assert_eq!(ckpt.state.global_step, 6, "the epoch-1 checkpoint stays");
}

#[test]
fn a_nan_loss_pauses_or_is_ignored_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.recipe.epochs = 5;
    cfg.on_nan = OnNan::Pause;
    cfg.kit.faults = Faults { nan_loss_from: Some(2), ..Faults::default() };
    let engine = Engine::start(cfg, common::subset(600, 100)).unwrap();
    let controls = engine.controls();
    let mut seen_warning = false;
    for e in engine.events().iter() {
        match e {
            Record::Event(Change::NotFinite { then: OnNan::Pause, .. }) => seen_warning = true,
            Record::Event(Change::Paused { .. }) => {
                assert!(seen_warning, "the warning comes first");
                controls.send(Control::Stop).unwrap();
            }
            _ => {}
        }
    }
    assert_eq!(engine.join().unwrap().summary.reason, FinishReason::Stopped);

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.on_nan = OnNan::Ignore;
    cfg.kit.faults = Faults { nan_loss_from: Some(2), ..Faults::default() };
    let (outcome, events) = run(cfg);
    assert_eq!(outcome.unwrap().summary.reason, FinishReason::Completed);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Record::Event(Change::NotFinite { then: OnNan::Ignore, .. })))
            .count(),
        1
    );
}

#[test]
fn a_panicking_worker_is_reported_and_the_checkpoint_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.kit.faults = Faults { worker_panic: Some((1, 8)), ..Faults::default() };
    let (outcome, events) = run(cfg);
    match outcome {
        Err(EngineError::Worker { replica: 1, device, error }) => {
            assert_eq!(device, "cpu");
            assert!(matches!(error, dpt_tui::engine::worker::WorkerError::Panic(_)), "{error:?}");
            assert!(error.to_string().contains("injected fault"), "{error}");
        }
        other => panic!("expected replica 1 to fail, got {:?}", other.map(|o| o.summary)),
    }
    assert!(events.iter().any(|e| matches!(e, Record::Event(Change::Failed { replica: Some(1), .. }))));
    let ckpt = Checkpoint::read(dir.path()).expect("the epoch-1 checkpoint is readable");
    assert_eq!(ckpt.state.global_step, 6);
}

#[test]
fn a_coordinator_panic_names_the_replica_and_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.kit.faults = Faults { coordinator_panic: Some((1, 4)), ..Faults::default() };
    let (outcome, events) = run(cfg);
    match outcome {
        Err(e @ EngineError::Coordinator { replica: Some(1), .. }) => {
            let text = e.to_string();
            assert!(text.contains("on replica 1 (cpu)") && text.contains("injected fault"), "{text}");
            assert!(!text.contains("CUDA_LAUNCH_BLOCKING"), "the CUDA hint is for CUDA devices: {text}");
        }
        other => panic!("expected the coordinator to fail on replica 1, got {:?}", other.map(|o| o.summary)),
    }
    assert!(events.iter().any(
        |e| matches!(e, Record::Event(Change::Failed { replica: Some(1), device: Some(d), .. }) if d == "cpu")
    ));
}

#[test]
fn a_stuck_replica_is_detected_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.placement.step_timeout = 1.5;
    cfg.kit.faults = Faults { worker_stall: Some((0, 3)), ..Faults::default() };
    let started = Instant::now();
    let (outcome, events) = run(cfg);
    match outcome {
        Err(EngineError::Stalled { replicas, .. }) => assert_eq!(replicas, vec![0]),
        other => panic!("expected a stall, got {:?}", other.map(|o| o.summary)),
    }
    assert!(events.iter().any(|e| matches!(e, Record::Event(Change::Failed { replica: Some(0), .. }))));
    // The timeout plus the shutdown grace period, not forever.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn resuming_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.settings.placement.max_steps = Some(1);
    run(cfg).0.unwrap();
    let ckpt = Checkpoint::read(dir.path()).unwrap();
    let err = Resume::new(ckpt, ModelKind::MnistNet, None, dir.path()).unwrap_err();
    assert!(err.to_string().contains("belongs to model 'lenet', not 'mnist-net'"), "{err}");
    std::fs::write(dir.path().join(CHECKPOINT_FILE), b"not a checkpoint").unwrap();
    let err = Checkpoint::read(dir.path()).err().expect("garbage is refused");
    assert!(err.to_string().contains("cannot read checkpoint"), "{err}");
}
