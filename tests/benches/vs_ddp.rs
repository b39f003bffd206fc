//! Benchmark: a user's TorchScript model in dpt-tui against its Python original under
//! torchrun's DistributedDataParallel (Gloo, one intra-op thread per process, the same global
//! batch), for torchvision and timm classifiers of different weights
//! (`tests/benches/torchvision_models.py` scripts them; `ddp_reference.py` is the DDP side). For
//! each model, in alternation, `BENCH_ROUNDS` times: dpt-tui with 1 process × `cpu:2`, dpt-tui
//! with 2 processes × `cpu:1` (the allreduce overlapping the backward pass, as by default), the
//! same with the allreduce after the backward pass (`--bucket-cap-mb 0`), and DDP with 2
//! processes; one epoch of the first `BENCH_SAMPLES` training images each; medians printed.
//!
//! `source .ci/env.sh && DPT_DATA=/usr/share/datasets/fashion-mnist cargo bench --bench vs_ddp`
//! Environment: `BENCH_MODELS` (comma-separated; default resnet18,mobilenet_v3_small,
//! efficientnet_b0,timm/vit_tiny_patch16_224,timm/regnetx_002), `BENCH_SAMPLES` (default 6400), `BENCH_BATCH` (default 128),
//! `BENCH_ROUNDS` (default 2), `DPT_DATA` (default: the shipped subset, 2,000 images).

use std::path::{Path, PathBuf};
use std::process::Command;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("an address")
        .port()
        .to_string()
}

fn python() -> PathBuf {
    std::env::var("VIRTUAL_ENV").map(|v| PathBuf::from(v).join("bin/python")).unwrap_or("python3".into())
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/benches").join(name)
}

/// The summary's samples/s of the run in `run`.
fn throughput(run: &Path) -> f64 {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).expect("a record");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "summary")
        .find_map(|r| r["samples_per_sec"].as_f64())
        .expect("a summary with samples/s")
}

fn main() {
    let models = env_or(
        "BENCH_MODELS",
        "resnet18,mobilenet_v3_small,efficientnet_b0,timm/vit_tiny_patch16_224,timm/regnetx_002",
    );
    let (samples, batch) = (env_or("BENCH_SAMPLES", "6400"), env_or("BENCH_BATCH", "128"));
    let rounds: usize = env_or("BENCH_ROUNDS", "2").parse().expect("BENCH_ROUNDS is a number");
    let data = std::env::var("DPT_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/fashion-mnist-subset"));
    let bin = env!("CARGO_BIN_EXE_dpt-tui");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    println!("one epoch of {samples} images, global batch {batch}, samples/s, median of {rounds}:");
    println!(
        "{:<26} {:>14} {:>14} {:>16} {:>10} {:>8} {:>8}",
        "model", "dpt 1 x cpu:2", "dpt 2 x cpu:1", "2 x 1 after bwd", "DDP 2 x 1", "1p/DDP", "2p/DDP"
    );
    for model in models.split(',') {
        let file = tmp.path().join(format!("{}.pt", model.replace('/', "-")));
        let made = Command::new(python()).arg(script("torchvision_models.py")).arg(model).arg(&file).status();
        assert!(made.expect("the virtualenv's python runs").success(), "scripting {model}");
        let common: Vec<String> = [
            "--headless",
            "--epochs",
            "1",
            "--log-every",
            "100000",
            "--test-limit",
            "100",
            "--train-limit",
            &samples,
            "--batch-size",
            &batch,
            "--model",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([file.display().to_string(), "--data".to_owned(), data.display().to_string()])
        .collect();
        let (mut one, mut two, mut after, mut ddp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let model_dir = model.replace('/', "-");
        for round in 0..rounds {
            let run = tmp.path().join(format!("{model_dir}-one-{round}"));
            let out =
                Command::new(bin).args(&common).args(["--devices", "cpu:2", "--run-dir"]).arg(&run).output();
            let out = out.expect("dpt-tui runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            one.push(throughput(&run));

            for (cap, out) in [("25", &mut two), ("0", &mut after)] {
                let run = tmp.path().join(format!("{model_dir}-two-{cap}-{round}"));
                two_ranks(bin, &common, cap, &run, tmp.path());
                out.push(throughput(&run));
            }

            let out = Command::new(python())
                .args(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", &free_port()])
                .arg(script("ddp_reference.py"))
                .arg(model)
                .arg(&data)
                .args([&samples, &batch])
                .env("OMP_NUM_THREADS", "1")
                .output()
                .expect("torchrun runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_owned();
            let v: serde_json::Value = serde_json::from_str(&line).expect("DDP's JSON line");
            ddp.push(v["samples_per_sec"].as_f64().expect("samples/s"));
        }
        let (a, b, c, d) = (median(&mut one), median(&mut two), median(&mut after), median(&mut ddp));
        println!("{model:<26} {a:>14.0} {b:>14.0} {c:>16.0} {d:>10.0} {:>8.2} {:>8.2}", a / d, b / d);
    }
}

/// dpt-tui on 2 processes × `cpu:1` with `--bucket-cap-mb cap`, rank 0 writing to `run`.
fn two_ranks(bin: &str, common: &[String], cap: &str, run: &Path, tmp: &Path) {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let mut c = Command::new(bin);
            c.args(common)
                .args(["--devices", "cpu:1", "--rank", &rank.to_string(), "--world-size", "2"])
                .args(["--master-addr", "127.0.0.1", "--master-port", &port, "--bucket-cap-mb", cap])
                .env("LOCAL_WORLD_SIZE", "2")
                .env("XDG_RUNTIME_DIR", tmp);
            if rank == 0 {
                c.arg("--run-dir").arg(run);
            }
            c.stdout(std::process::Stdio::null()).spawn().expect("a rank starts")
        })
        .collect();
    for mut r in ranks {
        assert!(r.wait().expect("a rank ends").success());
    }
}
