//! Array data whose targets are not class ids (`tests/scripts/array_targets.py`): float
//! regression targets `[N, 2]` trained by a model that computes its own loss end with PyTorch's
//! own loop's weights, on two replicas; integer masks `[N, 6, 6]` train a per-pixel loss whose
//! every evaluation equals PyTorch's on the saved weights; a classifier is refused them.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::Dpt;

fn make(dir: &Path, kind: &str) {
    let made = common::run_script("array_targets.py", &["make", dir.to_str().unwrap(), kind]);
    assert!(made.status.success(), "array_targets.py make {kind}: {}", String::from_utf8_lossy(&made.stderr));
}

fn dpt(dir: &Path, run: &str, extra: &[&str]) -> std::process::Output {
    Dpt::new()
        .headless()
        .data(dir.join("data.npz"))
        .run_dir(dir.join(run))
        .args(["--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--devices", "cpu:2"])
        .args(extra)
        .output()
}

#[test]
fn float_targets_train_as_pytorchs_loop_and_a_classifier_is_refused_them() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), "regression");
    let model = dir.path().join("model.pt");
    // The whole training set is each step's batch: the order of samples cannot matter.
    let args = ["--model", model.to_str().unwrap(), "--batch-size", "64", "--epochs", "5", "--lr", "0.1"];
    let out = dpt(dir.path(), "run", &[&args[..], &["--normalize", "0,1"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reference =
        common::run_script("array_targets.py", &["reference", dir.path().to_str().unwrap(), "5", "0.1"]);
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let theirs: std::collections::HashMap<String, Vec<f64>> =
        serde_json::from_slice(&reference.stdout).unwrap();
    let ours = common::weights(&dir.path().join("run"));
    assert_eq!(ours.len(), theirs.len());
    for (name, t) in &ours {
        let t = Vec::<f64>::try_from(t.reshape([-1]).to_kind(tch::Kind::Double)).unwrap();
        let r = &theirs[name];
        let worst = t.iter().zip(r).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-6, "{name}: {worst}");
    }
    let records = common::wait_for_summary(&dir.path().join("run"), std::time::Duration::from_secs(5));
    assert!(records[0]["data"].as_str().unwrap().contains("float targets of shape [2] per sample"));
    let summary = records.last().unwrap();
    assert!(summary["test_acc"].is_null() && summary["perplexity"].is_null(), "{summary}");
    assert!(summary["val_loss"].as_f64().unwrap() < 0.1, "{summary}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("perplexity") && !stdout.contains(" acc "), "{stdout}");
    assert!(!stdout.contains("classes"), "no classes counted for targets: {stdout}");

    // A built-in classifier, and a one-input model, are refused the targets in one line.
    for (model, says) in [
        ("lenet", "lenet is a classifier"),
        (dir.path().join("one.pt").to_str().unwrap(), "forward must take them"),
    ] {
        if model.ends_with("one.pt") {
            let made = common::run_script("array_targets.py", &["one", model]);
            assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        }
        let out = dpt(dir.path(), "refused", &["--model", model, "--batch-size", "64", "--epochs", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{model}: {stderr}");
        assert!(stderr.contains("targets of shape [2] per sample") && stderr.contains(says), "{stderr}");
        assert!(!dir.path().join("refused").exists());
    }
}

#[test]
fn integer_masks_train_a_per_pixel_loss_evaluated_as_pytorch_evaluates_it() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), "masks");
    let model = dir.path().join("model.pt");
    let args = ["--model", model.to_str().unwrap(), "--batch-size", "16", "--epochs", "6", "--lr", "0.5"];
    let out = dpt(dir.path(), "run", &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records = common::wait_for_summary(&dir.path().join("run"), std::time::Duration::from_secs(5));
    let evals: Vec<f64> =
        records.iter().filter(|r| r["kind"] == "epoch").map(|r| r["test_loss"].as_f64().unwrap()).collect();
    let last = evals[evals.len() - 1];
    assert!(last < 0.6 * evals[0], "the masks are learned: {evals:?}");
    // The last evaluation is PyTorch's loss of the saved model on the normalized test set
    // (every evaluation reads the test set as stored: none normalizes it twice).
    let norm = records[0]["normalize"].clone();
    let check = format!(
        "import torch, numpy as np, json\nm = torch.jit.load('{run}/model.pt'); d = np.load('{dir}/data.npz'); n = json.loads('{norm}')\nx = (torch.from_numpy(d['x_test']).unsqueeze(1) - n['mean'][0]) / n['std'][0]\nprint(m(x, torch.from_numpy(d['y_test']))[1].item())\n",
        run = dir.path().join("run").display(),
        dir = dir.path().display(),
    );
    let theirs = Command::new(common::python()).args(["-c", &check]).output().unwrap();
    assert!(theirs.status.success(), "{}", String::from_utf8_lossy(&theirs.stderr));
    let theirs: f64 = String::from_utf8_lossy(&theirs.stdout).trim().parse().unwrap();
    assert!((last - theirs).abs() < 1e-5 * theirs.abs().max(1.0), "ours {last} against PyTorch's {theirs}");
}
