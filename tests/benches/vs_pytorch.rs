//! Benchmark: dpt-tui against the seeds' PyTorch code on the same machine and the same
//! `torch==2.11.0` install, run in alternation.
//!
//! `source .ci/env.sh && cargo bench --bench vs_pytorch` prints, per model, the median
//! samples/s, sec/epoch and final test accuracy of each side and the ratio dpt-tui / PyTorch.
//! Environment: `BENCH_MODELS` (default `lenet,mnist-net`), `BENCH_ROUNDS` (3), `BENCH_EPOCHS`
//! (2), `BENCH_TRAIN_LIMIT` (all), `BENCH_DEVICES` (dpt-tui's `--devices`, default `auto`),
//! `BENCH_ARGS` (more dpt-tui flags), `PYTHON` (default: the set-up's virtualenv), `DPT_DATA`.
//! With several GPUs the PyTorch side is DistributedDataParallel over NCCL, one process per GPU
//! started by torchrun; with one GPU or the CPU, one process on the same device(s).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[derive(Default)]
struct Side {
    samples_per_sec: Vec<f64>,
    sec_per_epoch: Vec<f64>,
    test_acc: Vec<f64>,
}

impl Side {
    fn push(&mut self, v: &Value) {
        self.samples_per_sec.push(v["samples_per_sec"].as_f64().expect("samples_per_sec"));
        self.sec_per_epoch.push(v["sec_per_epoch"].as_f64().expect("sec_per_epoch"));
        self.test_acc.push(v["test_acc"].as_f64().expect("test_acc"));
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let data = PathBuf::from(env_or("DPT_DATA", dpt_tui::data::DEFAULT_DATA_DIR));
    let rounds: usize = env_or("BENCH_ROUNDS", "3").parse().expect("BENCH_ROUNDS");
    let epochs = env_or("BENCH_EPOCHS", "2");
    let devices = env_or("BENCH_DEVICES", "auto");
    let extra = env_or("BENCH_ARGS", "");
    let python = std::env::var("PYTHON")
        .or_else(|_| std::env::var("DPT_VENV").map(|v| format!("{v}/bin/python")))
        .unwrap_or_else(|_| "python3".to_owned());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/pytorch/seed_models.py");
    let limit = std::env::var("BENCH_TRAIN_LIMIT").ok();
    // The GPUs dpt-tui trains on; PyTorch gets the same ones (DDP when there are several).
    let gpus = if devices.trim() == "auto" {
        usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
    } else {
        devices.split(',').filter(|d| d.trim().starts_with("cuda")).count()
    };
    let tmp = tempfile::tempdir().unwrap();
    println!(
        "dpt-tui vs PyTorch: {rounds} rounds, {epochs} epochs, devices {devices}, data {}; PyTorch side: {}",
        data.display(),
        match gpus {
            0 => "one process on the CPU".to_owned(),
            1 => "one process on the GPU".to_owned(),
            n => format!("DDP over NCCL, {n} processes (torchrun)"),
        }
    );
    let mut rows = Vec::new();
    for model in env_or("BENCH_MODELS", "lenet,mnist-net").split(',') {
        let (mut ours, mut theirs) = (Side::default(), Side::default());
        for round in 0..rounds {
            let run_ours = |ours: &mut Side| {
                let run = tmp.path().join(format!("{model}-{round}"));
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_dpt-tui"));
                cmd.args(["--headless", "--model", model, "--devices", &devices, "--epochs", &epochs]);
                cmd.args([
                    "--data",
                    data.to_str().unwrap(),
                    "--run-dir",
                    run.to_str().unwrap(),
                    "--checkpoint-every",
                    "0",
                ]);
                cmd.args(extra.split_whitespace());
                if let Some(l) = &limit {
                    cmd.args(["--train-limit", l]);
                }
                let out = cmd.output().expect("dpt-tui runs");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
                let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
                ours.push(&summary);
            };
            let run_theirs = |theirs: &mut Side| {
                let mut cmd = Command::new(&python);
                if gpus > 1 {
                    // Several GPUs: real DDP over NCCL, one process per GPU, as torchrun starts it.
                    let n = gpus.to_string();
                    cmd.args(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", &n]);
                }
                cmd.arg(&script);
                cmd.args(["--device", if gpus > 0 { "cuda" } else { "cpu" }]);
                if gpus > 1 {
                    cmd.arg("--ddp");
                }
                cmd.args(["--model", model, "--epochs", &epochs, "--data", data.to_str().unwrap()]);
                if let Some(l) = &limit {
                    cmd.args(["--train-limit", l]);
                }
                let out = cmd.output().expect("python runs");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                let stdout = String::from_utf8_lossy(&out.stdout);
                let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line");
                theirs.push(&serde_json::from_str(line).unwrap());
            };
            // Alternate which side goes first, so drift in the machine's load hits both.
            if round % 2 == 0 {
                run_ours(&mut ours);
                run_theirs(&mut theirs);
            } else {
                run_theirs(&mut theirs);
                run_ours(&mut ours);
            }
            println!(
                "{model} round {}: dpt-tui {:.1} samples/s (acc {:.3}), PyTorch {:.1} samples/s (acc {:.3})",
                round + 1,
                ours.samples_per_sec[round],
                ours.test_acc[round],
                theirs.samples_per_sec[round],
                theirs.test_acc[round]
            );
        }
        let (o, t) = (median(&ours.samples_per_sec), median(&theirs.samples_per_sec));
        // The ratio of each round's pair, run back to back, is robust to the machine's drift.
        let pair: Vec<f64> =
            ours.samples_per_sec.iter().zip(&theirs.samples_per_sec).map(|(a, b)| a / b).collect();
        rows.push(format!(
            "| {model} | {o:.0} | {:.2} | {:.3} | {t:.0} | {:.2} | {:.3} | {:.2}x | {:.2}x |",
            median(&ours.sec_per_epoch),
            median(&ours.test_acc),
            median(&theirs.sec_per_epoch),
            median(&theirs.test_acc),
            o / t,
            median(&pair)
        ));
    }
    println!(
        "\n| model | dpt-tui samples/s | sec/epoch | test acc | PyTorch samples/s | sec/epoch | test acc | ratio of medians | median pair ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
}
