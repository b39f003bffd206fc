//! The user's own TorchScript models, made by the virtualenv's Python
//! (`tests/scripts/make_model.py`) and trained data-parallel: the same invariants as the
//! built-in models (replicas identical, 1 vs k replicas, exact resume), the exported model
//! reloaded in Python, and every bad model refused before anything is written.

use crate::common;
use common::Dpt;

use std::path::Path;
use std::sync::Arc;

use dpt_core::device::DeviceId;
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{Engine, FinishReason, Outcome, Resume, TrainConfig};
use dpt_tui::model::script::ScriptModel;
use dpt_tui::model::ModelKind;
use dpt_tui::persist::checkpoint::{Checkpoint, CHECKPOINT_FILE};

fn read(path: &Path) -> Arc<ScriptModel> {
    Arc::new(ScriptModel::read(path).expect("a good model reads"))
}

/// 300 samples in batches of 96 (a partial 4th batch of 12), seed 11.
fn config(model: &Arc<ScriptModel>, replicas: usize) -> TrainConfig {
    let mut cfg = TrainConfig::for_script(Arc::clone(model), vec![DeviceId::Cpu; replicas]);
    cfg.settings.recipe.batch_size = 96;
    cfg.settings.optimizer = OptimConfig::sgd(0.05, 0.9, 1e-4);
    cfg.settings.recipe.seed = 11;
    cfg.settings.placement.check_replicas = true;
    cfg
}

fn train(cfg: TrainConfig) -> Outcome {
    let engine = Engine::start(cfg, common::subset(300, 100)).expect("engine starts");
    for _ in engine.events().iter() {}
    engine.join().expect("training succeeds with identical replicas")
}

#[test]
fn an_mlp_on_two_and_three_replicas_matches_one_replica() {
    let dir = tempfile::tempdir().unwrap();
    let model = read(&common::make_model("mlp", 1, dir.path()));
    assert!(!model.random);
    let steps = |k| {
        let mut cfg = config(&model, k);
        cfg.settings.placement.max_steps = Some(6);
        train(cfg)
    };
    let one = steps(1);
    for k in [2, 3] {
        let d = common::max_relative_difference(&one, &steps(k));
        assert!(d < 1e-4, "{k} replicas differ from one by {d}");
    }
    // Training moved the weights away from the file's.
    let start = ScriptModel::read(&model.path).unwrap();
    let first = one.final_params[0].1.double_value(&[0, 0]);
    assert_ne!(first, start.initial_values().unwrap().0.double_value(&[0]));
}

#[test]
fn a_cnn_with_batchnorm_and_dropout_keeps_its_replicas_identical_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let model = read(&common::make_model("cnn", 1, dir.path()));
    assert!(model.random, "dropout is found in the code");
    assert_eq!(model.buffers.iter().filter(|b| b.name.contains("running")).count(), 4);
    let run = || {
        let mut cfg = config(&model, 2);
        cfg.settings.placement.max_steps = Some(5);
        train(cfg)
    };
    // check_replicas compares parameters and BatchNorm buffers after every step.
    let a = run();
    assert_eq!(a.summary.reason, FinishReason::StepLimit);
    assert_eq!(common::max_relative_difference(&a, &run()), 0.0, "per-replica dropout streams are seeded");
    let mean = a.final_params.iter().find(|(n, _)| n == "bn1.running_mean").expect("BN statistics are kept");
    assert!(mean.1.abs().sum(tch::Kind::Double).double_value(&[]) > 0.0, "running statistics moved");
}

#[test]
fn a_stopped_cnn_run_resumes_to_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let model = read(&common::make_model("cnn", 1, dir.path()));
    let with_dir = |run: &Path| {
        let mut cfg = config(&model, 2);
        (cfg.settings.recipe.epochs, cfg.run_dir, cfg.settings.placement.check_replicas) =
            (2, Some(run.to_owned()), false);
        cfg
    };
    let straight_dir = tempfile::tempdir().unwrap();
    let straight = train(with_dir(straight_dir.path()));
    let run = tempfile::tempdir().unwrap();
    let mut first = with_dir(run.path());
    first.settings.placement.max_steps = Some(5);
    train(first);
    let ckpt = Checkpoint::read(run.path()).unwrap();
    assert_eq!(ckpt.state.model(), ModelKind::Script);
    assert_eq!(ckpt.state.settings.model.name.file(), Some(model.path.as_path()));
    let mut resumed = with_dir(run.path());
    let path = run.path().join(CHECKPOINT_FILE);
    resumed.kit.resume = Some(Box::new(Resume::new(ckpt, ModelKind::Script, Some(&model), &path).unwrap()));
    let resumed = train(resumed);
    assert_eq!(resumed.summary.global_steps, straight.summary.global_steps);
    assert_eq!(common::max_relative_difference(&straight, &resumed), 0.0);
}

#[test]
fn the_exported_model_reloads_in_python_with_the_accuracy_dpt_tui_reported() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::make_model("cnn", 1, dir.path());
    let run = dir.path().join("run");
    let out = Dpt::new()
        .args(["--headless", "--devices", "cpu:2", "--epochs", "2", "--model", model.to_str().unwrap()])
        .args(["--data", common::subset_dir().to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("cnn1.pt (TorchScript)"), "the start line names the file:\n{stdout}");
    let records = common::wait_for_summary(&run, std::time::Duration::from_secs(5));
    assert_eq!(records[0]["model"], "torchscript");
    assert_eq!(records[0]["model_file"], model.to_str().unwrap());
    let reported = records.iter().rev().find_map(|r| r["test_acc"].as_f64()).expect("a test accuracy");
    // The start record says how the inputs were normalized (the training set's statistics).
    let norm = &records[0]["normalize"];
    let (mean, std) = (norm["mean"][0].as_f64().unwrap(), norm["std"][0].as_f64().unwrap());
    assert!(mean > 0.1 && std > 0.1, "Fashion-MNIST's own statistics: {norm}");
    let (model, data) = (run.join("model.pt"), common::subset_dir());
    let (model, data) = (model.to_str().unwrap(), data.to_str().unwrap());
    let eval = common::run_script("evaluate.py", &[model, data, &mean.to_string(), &std.to_string()]);
    assert!(eval.status.success());
    let line = String::from_utf8_lossy(&eval.stdout);
    let python: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let theirs = python["test_acc"].as_f64().unwrap();
    assert!((theirs - reported).abs() < 1e-6, "Python {theirs} vs dpt-tui {reported}");
    assert!(run.join("model.safetensors").is_file());
    // The evaluation breakdown is PyTorch's too: top-5 and the confusion counts.
    let epoch = records.iter().rev().find(|r| r["kind"] == "epoch").expect("an epoch record");
    let top5 = epoch["top5_acc"].as_f64().expect("top-5 recorded");
    assert!(
        (python["top5_acc"].as_f64().unwrap() - top5).abs() < 1e-6,
        "top-5 {top5} vs {}",
        python["top5_acc"]
    );
    assert_eq!(epoch["confusion"], python["confusion"], "the confusion counts");
    let per_class = epoch["per_class_acc"].as_array().unwrap();
    let rows = python["confusion"].as_array().unwrap();
    for (k, (acc, row)) in per_class.iter().zip(rows).enumerate() {
        let row: Vec<f64> = row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let want = row[k] / row.iter().sum::<f64>();
        assert!((acc.as_f64().unwrap() - want).abs() < 1e-9, "class {k}");
    }
}

#[test]
fn bad_models_are_refused_at_start_with_one_line_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pt");
    std::fs::write(&garbage, b"not a zip archive").unwrap();
    let cases = [
        (garbage, "is not a TorchScript file"),
        (dir.path().join("missing.pt"), "no such file"),
        (common::make_model("no-params", 1, dir.path()), "has no trainable parameters"),
        (common::make_model("double", 1, dir.path()), "call model.float() before saving"),
        (common::make_model("fails", 1, dir.path()), "forward failed on one sample of shape [2, 1, 28, 28]"),
        (common::make_model("wrong-shape", 1, dir.path()), "it must return [N, classes]"),
        (
            common::make_model("few-classes", 1, dir.path()),
            "predicts 3 classes but the data's labels go up to 9",
        ),
    ];
    for (model, needle) in cases {
        let run = dir.path().join("never");
        let out = Dpt::new()
            .args(["--headless", "--devices", "cpu", "--model", model.to_str().unwrap()])
            .args(["--data", common::subset_dir().to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
            .output();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{model:?}: {stderr}");
        assert!(stderr.contains(needle), "{model:?}: expected {needle:?} in {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(!run.exists(), "{model:?}: nothing may be written");
    }
}
