//! The real binary: headless output, the run directory's schema, exit codes on bad input.

use crate::common;
use common::Dpt;

use std::process::Output;

use serde_json::Value;

fn dpt(args: &[&str]) -> Output {
    Dpt::new().args(args).env_remove("DPT_DATA").output()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

use common::records;

fn has_numbers(record: &Value, keys: &[&str]) {
    for k in keys {
        assert!(record[k].is_number(), "{k} missing in {record}");
    }
}

#[test]
fn headless_run_prints_progress_and_writes_the_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let data = common::subset_dir();
    let out = dpt(&[
        "--data",
        data.to_str().unwrap(),
        "--devices",
        "cpu:2",
        "--epochs",
        "2",
        "--train-limit",
        "600",
        "--test-limit",
        "200",
        "--batch-size",
        "100",
        "--log-every",
        "2",
        "--run-dir",
        run.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("lenet (129,068 parameters) on [cpu, cpu]"), "{stdout}");
    // The limits take samples spread over each split, and the data line says what they cover.
    assert!(stdout.contains("(--train-limit 600 of 2,000 spread evenly: 10 of 10 classes)"), "{stdout}");
    assert!(stdout.contains("(--test-limit 200 of 500 spread evenly: 10 of 10 classes)"), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("epoch 1/2 step")).count(), 3, "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("epoch 2/2 done: train loss")), "{stdout}");
    let acc_line = stdout.lines().find(|l| l.starts_with("test acc: ")).expect("summary line");
    assert!(acc_line.ends_with("sec/epoch on [cpu, cpu]"), "{acc_line}");
    assert!(stdout.lines().any(|l| l.starts_with("speed: ") && l.ends_with(" samples/sec")), "{stdout}");
    assert!(run.join("model.safetensors").exists());

    let recs = records(&run);
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"start"));
    assert_eq!(kinds.last(), Some(&"summary"));
    assert_eq!(kinds.iter().filter(|k| **k == "epoch").count(), 2);
    assert_eq!(kinds.iter().filter(|k| **k == "step").count(), 6);
    for r in &recs {
        match r["kind"].as_str().unwrap() {
            "step" => has_numbers(r, &["epoch", "step", "loss", "acc", "lr", "samples_per_sec"]),
            "epoch" => has_numbers(
                r,
                &[
                    "epoch",
                    "train_loss",
                    "train_acc",
                    "test_acc",
                    "test_loss",
                    "epoch_seconds",
                    "samples_per_sec",
                    "lr",
                ],
            ),
            "summary" => {
                has_numbers(r, &["test_acc", "sec_per_epoch", "samples_per_sec"]);
                assert_eq!(r["devices"], serde_json::json!(["cpu", "cpu"]));
                assert_eq!(r["model"], "lenet");
            }
            _ => {}
        }
    }
    let saved = recs.iter().any(|r| r["kind"] == "event" && r["event"] == "saved");
    assert!(saved, "the final save is logged");
}

/// Runs with bad input: exit status 2, one line on stderr containing `needle`, no panic.
fn refused(args: &[&str], needle: &str) {
    let out = dpt(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("dpt-tui: "), "{stderr}");
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    let data = common::subset_dir();
    let d = data.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("r");
    let r = run.to_str().unwrap();
    refused(&["--data", d, "--run-dir", r, "--batch-size", "0"], "--batch-size must be at least 1");
    refused(
        &["--data", d, "--run-dir", r, "--devices", "cpu:4", "--batch-size", "3"],
        "smaller than the 4 replicas",
    );
    refused(&["--data", d, "--run-dir", r, "--lr", "nan"], "--lr must be a positive finite number");
    refused(&["--data", d, "--run-dir", r, "--lr", "-0.1"], "--lr must be a positive finite number");
    refused(&["--data", d, "--run-dir", r, "--lr", "inf"], "--lr must be a positive finite number");
    refused(&["--data", d, "--run-dir", r, "--epochs", "0"], "--epochs must be at least 1");
    refused(&["--data", d, "--run-dir", r, "--model", "vgg"], "invalid value 'vgg'");
    // A flag clap does not know: its tip in the same line.
    refused(
        &["--data", d, "--run-dir", r, "--epoch", "2"],
        "unexpected argument '--epoch' found; tip: a similar argument exists: '--epochs'",
    );
    refused(&["--data", d, "--run-dir", r, "--devices", "gpu0"], "unknown device 'gpu0'");
    refused(&["--data", d, "--run-dir", r, "--devices", "cuda:99"], "cuda:99 does not exist");
    refused(&["--data", "/nonexistent/data", "--run-dir", r], "apt-get install dataset-fashion-mnist");
    refused(&["--data", d, "--run-dir", r, "--theme", "solarized"], "unknown theme 'solarized'");
    let theme = tmp.path().join("bad.toml");
    std::fs::write(&theme, "accent = \"not-a-colour\"\n").unwrap();
    refused(&["--data", d, "--run-dir", r, "--theme", theme.to_str().unwrap()], "is not a colour");
    std::fs::write(&theme, "accent = [1, 2\n").unwrap();
    refused(&["--data", d, "--run-dir", r, "--theme", theme.to_str().unwrap()], "is malformed");
    refused(&["--data", d, "--run-dir", r, "--fps", "0"], "--fps");
    refused(&["--data", d, "--run-dir", r, "--devices", "cpu", "--zero", "1"], "and this run has one");
    refused(&["--data", d, "--run-dir", r, "--zero", "3"], "unknown ZeRO stage '3'; use 0, 1 or 2");
    refused(
        &["--data", d, "--run-dir", r, "--devices", "cpu", "--zero", "2"],
        "--zero 2 splits the gradients",
    );
    refused(
        &["--data", d, "--run-dir", r, "--devices", "cpu:2", "--zero", "2", "--bucket-cap-mb", "0"],
        "--bucket-cap-mb 0 turns the buckets off",
    );
    // Two parameters cut from one tensor, overlapping: stage 2 would cut them apart.
    let overlapping = common::make_model("overlapping", 1, tmp.path());
    refused(
        &[
            "--data",
            d,
            "--run-dir",
            r,
            "--model",
            overlapping.to_str().unwrap(),
            "--devices",
            "cpu:2",
            "--zero",
            "2",
        ],
        "cannot keep low and high together: the model's parameters share storage",
    );
    // The data and model flags of the bring-your-own-model work.
    refused(&["--data", d, "--run-dir", r, "--normalize", "0.5"], "--normalize takes MEAN,STD");
    refused(&["--data", d, "--run-dir", r, "--normalize", "0.5,-1"], "positive stds");
    refused(
        &["--data", d, "--run-dir", r, "--normalize", "0.5,0.5,0.5,0.2,0.2,0.2"],
        "gives 3 channels' values but the images have 1",
    );
    refused(&["--data", d, "--run-dir", r, "--loss", "nll"], "--loss is for TorchScript models");
    refused(&["--data", d, "--run-dir", r, "--loss", "hinge"], "unknown loss 'hinge'");
    refused(&["--data", d, "--run-dir", r, "--data-format", "parquet"], "unknown data format 'parquet'");
    refused(&["--data", d, "--run-dir", r, "--data-format", "cifar10"], "no data_batch_1.bin in");
    refused(&["--data", d, "--run-dir", r, "--image-size", "0,32"], "--image-size takes H,W");
    refused(&["--data", d, "--run-dir", r, "--precision", "fp8"], "use f32, bf16 or f16");
    refused(&["--data", d, "--run-dir", r, "--max-bad-images", "2"], "--max-bad-images takes a share");
    refused(
        &["--data", d, "--run-dir", r, "--precision", "f16", "--loss-scale-init", "0"],
        "--loss-scale-init must be",
    );
    refused(
        &["--data", d, "--run-dir", r, "--loss-scale-interval", "0", "--loss-scale", "on"],
        "--loss-scale-interval at least 1",
    );
    refused(&["--data", d, "--run-dir", r, "--loss-scale-init", "1024"], "add --loss-scale on");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(&["--data", empty.to_str().unwrap(), "--run-dir", r], "cannot tell what");
    assert!(!run.exists(), "no run directory is created for bad input");

    let corrupt = tmp.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    for f in std::fs::read_dir(&data).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, corrupt.join(f.file_name().unwrap())).unwrap();
    }
    let labels = corrupt.join("train-labels-idx1-ubyte.gz");
    let bytes = std::fs::read(&labels).unwrap();
    std::fs::write(&labels, &bytes[..bytes.len() / 2]).unwrap();
    refused(&["--data", corrupt.to_str().unwrap(), "--run-dir", r], "corrupt or truncated gzip");
}

#[test]
fn float16_trains_with_a_dynamic_loss_scale_in_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let data = common::subset_dir();
    let out = dpt(&[
        "--data",
        data.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--model",
        "mnist-net",
        "--precision",
        "f16",
        "--loss-scale-init",
        "4096",
        "--epochs",
        "1",
        "--train-limit",
        "512",
        "--test-limit",
        "64",
        "--batch-size",
        "64",
        "--log-every",
        "4",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("dynamic loss scale from 4096, doubled after 2000 clean steps"), "{stdout}");
    assert!(stdout.contains("loss scale 4096"), "{stdout}");
    let recs = records(&run);
    assert_eq!(recs[0]["precision"], "f16");
    assert_eq!(recs[0]["loss_scale"]["init"], 4096.0);
    let steps: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "step").collect();
    assert!(!steps.is_empty());
    for s in steps {
        assert_eq!(s["loss_scale"], 4096.0, "no overflow at this scale: {s}");
        assert_eq!(s["skipped_steps"], 0);
        assert!(s["loss"].as_f64().is_some_and(f64::is_finite));
    }
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let tree: dpt_tui::settings::Settings = toml::from_str(&config).unwrap();
    assert_eq!(tree.precision.loss_scaling().map(|l| l.init), Some(4096.0), "{config}");
}

#[test]
fn an_occupied_run_directory_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("metrics.jsonl"), "{\"kind\":\"start\"}\n").unwrap();
    let data = common::subset_dir();
    refused(
        &["--data", data.to_str().unwrap(), "--run-dir", tmp.path().to_str().unwrap()],
        "already holds a run",
    );
    assert_eq!(std::fs::read_to_string(tmp.path().join("metrics.jsonl")).unwrap(), "{\"kind\":\"start\"}\n");
}

#[test]
fn a_doctor_rank_given_a_bad_spec_says_so_and_fails() {
    let out = Dpt::new().args(["doctor", "--peer", "nonsense"]).output();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("internal to 'dpt-tui doctor'"));
}

#[test]
fn doctor_checks_this_machine() {
    let out = Dpt::new()
        .arg("doctor")
        .env_remove("TORCH_NCCL_ASYNC_ERROR_HANDLING")
        .env_remove("NCCL_ASYNC_ERROR_HANDLING")
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for needle in [
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (set by dpt-tui",
        "libtorch",
        "NCCL",
        "ok    a training step of lenet on cpu",
        "ok    a training step of resnet18 on cpu",
        "ok    c10d Gloo allreduce, 2 local processes",
        "all is well",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
    if tch::Cuda::device_count() == 0 {
        assert!(stdout.contains("no GPU here: the CPU path is checked"), "{stdout}");
    }
    // The driver's verdict comes first (here: none, so the CPU).
    let first = stdout.lines().next().unwrap_or("");
    assert!(first.starts_with("ok   ") && first.contains("driver"), "{first}");
}

/// A torch of another version than the build's taken at run time (here through
/// `LD_LIBRARY_PATH`, which the binary's RUNPATH yields to: the same libraries, hard-linked
/// into a folder whose `version.py` says 2.11.9) is said in one line with exit 2.
#[test]
fn a_libtorch_of_another_version_is_said_in_one_line() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let real = dpt_tui::device::libtorch::loaded_dir(&maps).expect("the test maps libtorch");
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("torch").join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for entry in std::fs::read_dir(&real).unwrap() {
        let from = entry.unwrap().path();
        if from.is_file() && std::fs::hard_link(&from, lib.join(from.file_name().unwrap())).is_err() {
            eprintln!("skipped: cannot hard-link {} into {}", from.display(), tmp.path().display());
            return;
        }
    }
    // Its own RUNPATH finds CUDA's libraries beside torch (`$ORIGIN/../../nvidia/…`).
    let site = real.parent().and_then(|t| t.parent()).unwrap();
    for entry in std::fs::read_dir(site).unwrap() {
        let from = entry.unwrap().path();
        if from.file_name().is_some_and(|n| n != "torch") {
            std::os::unix::fs::symlink(&from, tmp.path().join(from.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(tmp.path().join("torch").join("version.py"), "__version__ = '2.11.9+cu130'\n").unwrap();
    let out = Dpt::new().arg("--help").env("LD_LIBRARY_PATH", &lib).output();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("but loads torch 2.11.9+cu130") && err.contains("bash .ci/setup"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
