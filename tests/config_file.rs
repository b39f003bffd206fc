//! Run configuration files: a run started from one, the resolved `config.toml` every run
//! directory gets, and that file repeating the run exactly.

use crate::common;

use std::path::Path;

use common::Dpt;
use dpt_tui::engine::optim::schedule::Shape;
use dpt_tui::engine::optim::OptimizerKind;
use dpt_tui::settings::Settings;

fn weights(run: &Path) -> Vec<(String, tch::Tensor)> {
    let mut w = tch::Tensor::read_safetensors(run.join("model.safetensors")).unwrap();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

#[test]
fn a_runs_config_toml_repeats_it_and_flags_override_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = tmp.path().join("recipe.toml");
    let data = common::subset_dir();
    std::fs::write(
        &recipe,
        format!(
            "data = {:?}\ndevices = \"cpu:2\"\nepochs = 5\noptimizer = \"adamw\"\nlr = 0.002\nweight_decay = 0.05\n\
             lr_schedule = \"cosine\"\nwarmup_steps = 2\nlabel_smoothing = 0.1\nema = 0.9\ntrain_limit = 256\n\
             test_limit = 64\nbatch_size = 64\nseed = 3\n",
            data.to_str().unwrap()
        ),
    )
    .unwrap();
    let first = tmp.path().join("first");
    // The command line overrides the file: 1 epoch, not 5.
    let out = Dpt::new()
        .args([
            "--headless",
            "--config",
            recipe.to_str().unwrap(),
            "--epochs",
            "1",
            "--run-dir",
            first.to_str().unwrap(),
        ])
        .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 epochs x 4 steps") && stdout.contains("adamw") && stdout.contains("cosine"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(first.join("config.toml")).unwrap();
    let tree: Settings = toml::from_str(&written).unwrap();
    assert_eq!(tree.recipe.epochs, 1, "{written}");
    assert_eq!(tree.optimizer.kind, OptimizerKind::AdamW, "{written}");
    assert_eq!(tree.schedule.shape, Shape::Cosine, "{written}");
    assert_eq!(tree.recipe.ema, Some(0.9), "{written}");
    assert_eq!(tree.recipe.seed, 3, "{written}");
    assert_eq!(tree.placement.devices, "cpu,cpu", "{written}");
    let again = tmp.path().join("again");
    let config = first.join("config.toml");
    let out = Dpt::new()
        .args(["--headless", "--config", config.to_str().unwrap(), "--run-dir", again.to_str().unwrap()])
        .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for ((n, a), (m, b)) in weights(&first).iter().zip(&weights(&again)) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs: the config did not repeat the run");
    }
}

#[test]
fn an_unknown_key_or_a_bad_file_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "epochs = 2\nlearning_rate = 0.1\n").unwrap();
    let out = Dpt::new().args(["--headless", "--config", bad.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown key 'learning_rate'"), "{stderr}");
    let out = Dpt::new()
        .args(["--headless", "--config", tmp.path().join("missing.toml").to_str().unwrap()])
        .output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
    // A table of the settings tree with a key the tree lacks: the key and the file are named.
    let nested = tmp.path().join("nested.toml");
    std::fs::write(&nested, "[optimizer]\nlr = 0.1\nlearning_rate = 0.1\n").unwrap();
    let out = Dpt::new().args(["--headless", "--config", nested.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("nested.toml") && stderr.contains("learning_rate") && stderr.contains("optimizer"),
        "{stderr}"
    );
}

#[test]
fn the_evaluation_batch_is_a_placement_setting_that_changes_no_figure_but_the_last_bits() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let run = |name: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        let mut args = vec![
            "--headless",
            "--data",
            data.to_str().unwrap(),
            "--train-limit",
            "256",
            "--test-limit",
            "100",
        ];
        args.extend(["--epochs", "1", "--devices", "cpu:2", "--run-dir", dir.to_str().unwrap()]);
        args.extend(extra);
        (Dpt::new().args(&args).output(), dir)
    };
    let (out, plain) = run("plain", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (out, small) = run("small", &["--eval-batch-size", "7"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let epoch = |dir: &Path| -> serde_json::Value {
        let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["kind"] == "epoch")
            .unwrap()
    };
    let (a, b) = (epoch(&plain), epoch(&small));
    assert_eq!(a["test_acc"], b["test_acc"], "the same predictions in other batches");
    let (la, lb) = (a["test_loss"].as_f64().unwrap(), b["test_loss"].as_f64().unwrap());
    assert!((la - lb).abs() <= 1e-5 * la.abs(), "{la} vs {lb}");
    let tree: Settings =
        toml::from_str(&std::fs::read_to_string(small.join("config.toml")).unwrap()).unwrap();
    assert_eq!(tree.placement.eval_batch_size.map(|n| n.get()), Some(7));
    let (out, _) = run("zero", &["--eval-batch-size", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--eval-batch-size"));
}
