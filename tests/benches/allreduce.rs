//! Benchmark: the cost of the gradient allreduce across processes (c10d's Gloo over loopback
//! TCP) against the in-process path (tensor copies between replicas), for the flat buckets of
//! lenet (129,068 floats) and resnet18 (11,175,818 floats); then whole-run throughput of 2
//! processes × `cpu:1` against 1 process × `cpu:2` on lenet.
//!
//! `source .ci/env.sh && cargo bench --bench allreduce` prints medians. Environment:
//! `BENCH_REPEATS` (allreduces per size, default 30), `BENCH_ROUNDS` (runs per side, default 3),
//! `BENCH_EPOCHS` (default 2), `DPT_DATA` (default: the shipped subset).
//!
//! The two Gloo ranks are two threads of this process, each with its own process group, so
//! every byte crosses a loopback socket as it would between two processes on one machine.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dpt_sys::c10d::{Backend, Group, ReduceOp, Store};
use dpt_tui::engine::allreduce::allreduce_sum;
use tch::{Kind, Tensor};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("an address").port()
}

/// Median seconds of `repeats` Gloo allreduces of `numel` floats between two ranks, in 25 MB
/// buckets as the trainer sends them.
fn gloo(numel: i64, repeats: usize) -> f64 {
    let port = free_port();
    let timeout = Duration::from_secs(60);
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = Store::tcp("127.0.0.1", port, 2, rank == 0, timeout).expect("store");
                let group = Group::new(Backend::Gloo, &store, rank, 2, timeout).expect("group");
                let flat = Tensor::ones([numel], (Kind::Float, tch::Device::Cpu));
                let mut times = Vec::new();
                for i in 0..repeats + 3 {
                    let t0 = Instant::now();
                    let mut chunks = flat.split(dpt_tui::dist::world::BUCKET_ELEMS, 0);
                    let works: Vec<_> = chunks
                        .iter_mut()
                        .map(|c| group.allreduce(std::slice::from_mut(c), ReduceOp::Sum).expect("allreduce"))
                        .collect();
                    for w in works {
                        w.wait(timeout).expect("wait");
                    }
                    if i >= 3 {
                        times.push(t0.elapsed().as_secs_f64());
                    }
                }
                median(&mut times)
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().expect("rank")).fold(0.0, f64::max)
}

/// Median seconds of the in-process sum of two replicas' buckets and the hand-back.
fn in_process(numel: i64, repeats: usize) -> f64 {
    let mut grads: Vec<Tensor> =
        (0..2).map(|_| Tensor::ones([numel], (Kind::Float, tch::Device::Cpu))).collect();
    let mut times = Vec::new();
    for i in 0..repeats + 3 {
        let t0 = Instant::now();
        let _ = allreduce_sum(&mut grads);
        if i >= 3 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    median(&mut times)
}

/// samples/s of one run from its summary.
fn throughput(run: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics");
    let last: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a summary")).expect("json");
    last["samples_per_sec"].as_f64().expect("samples_per_sec")
}

fn main() {
    let repeats: usize = env_or("BENCH_REPEATS", "30").parse().expect("BENCH_REPEATS");
    let rounds: usize = env_or("BENCH_ROUNDS", "3").parse().expect("BENCH_ROUNDS");
    let epochs = env_or("BENCH_EPOCHS", "2");
    let data = std::env::var("DPT_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/fashion-mnist-subset"));
    println!("allreduce of the flat gradient bucket, median of {repeats}:");
    println!("{:<10} {:>12} {:>16} {:>16}", "model", "floats", "in-process ms", "gloo 2 ranks ms");
    for (model, numel) in [("lenet", 129_068i64), ("resnet18", 11_175_818)] {
        let local = in_process(numel, repeats);
        let remote = gloo(numel, repeats);
        println!("{model:<10} {numel:>12} {:>16.3} {:>16.3}", local * 1e3, remote * 1e3);
    }
    let bin = env!("CARGO_BIN_EXE_dpt-tui");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let common = ["--model", "lenet", "--epochs", &epochs, "--headless", "--log-every", "1000"];
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let run = tmp.path().join(format!("one-{round}"));
        let out = Command::new(bin)
            .args(common)
            .args(["--devices", "cpu:2", "--data"])
            .arg(&data)
            .arg("--run-dir")
            .arg(&run)
            .output()
            .expect("dpt-tui runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        one.push(throughput(&run));
        let run = tmp.path().join(format!("two-{round}"));
        let port = free_port().to_string();
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let mut c = Command::new(bin);
                c.args(common)
                    .args(["--devices", "cpu:1", "--data"])
                    .arg(&data)
                    .args(["--rank", &rank.to_string(), "--world-size", "2", "--master-addr", "127.0.0.1"])
                    .args(["--master-port", &port])
                    .env("LOCAL_WORLD_SIZE", "2")
                    .env("XDG_RUNTIME_DIR", tmp.path());
                if rank == 0 {
                    c.arg("--run-dir").arg(&run);
                }
                c.stdout(std::process::Stdio::null()).spawn().expect("a rank starts")
            })
            .collect();
        for mut r in ranks {
            assert!(r.wait().expect("a rank ends").success());
        }
        two.push(throughput(&run));
    }
    println!("lenet, {epochs} epochs, median of {rounds} runs in alternation:");
    println!("  1 process  x cpu:2  {:>8.0} samples/s", median(&mut one));
    println!("  2 processes x cpu:1 {:>8.0} samples/s (Gloo over loopback)", median(&mut two));
}
