//! Benchmark: what the dashboard costs in training throughput against headless mode.
//!
//! `cargo bench --bench dashboard_overhead` (after `source .ci/env.sh`) runs the same training in
//! alternation, headless and with the dashboard in a pseudo-terminal (120×40, 10 fps, 1 s
//! device sampling), and compares the median samples/s that each run's metrics.jsonl summary
//! reports. Environment: `DPT_DATA` (default: the system Fashion-MNIST, else the shipped
//! subset), `BENCH_PAIRS` (default 5), `BENCH_ARGS` (extra flags, e.g. `--model mnist-net`).

#[path = "../common/pty.rs"]
#[allow(dead_code)]
mod pty;

// What pty.rs uses of the tests' common module.
#[path = "../common/launch.rs"]
#[allow(dead_code)]
mod launch;
use launch::{until, BIN};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn data_dir() -> PathBuf {
    if let Ok(d) = std::env::var("DPT_DATA") {
        return d.into();
    }
    let system = PathBuf::from(dpt_tui::data::DEFAULT_DATA_DIR);
    if system.join("train-images-idx3-ubyte.gz").exists() {
        system
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/fashion-mnist-subset")
    }
}

fn samples_per_sec(run: &Path) -> f64 {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics.jsonl");
    let summary: serde_json::Value = serde_json::from_str(text.lines().last().expect("a record")).unwrap();
    assert_eq!(summary["kind"], "summary", "the run finished");
    summary["samples_per_sec"].as_f64().expect("samples_per_sec")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let pairs: usize = std::env::var("BENCH_PAIRS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let extra = std::env::var("BENCH_ARGS").unwrap_or_default();
    let data = data_dir();
    let mut args: Vec<String> =
        ["--devices", "cpu:2", "--epochs", "1", "--train-limit", "30000", "--test-limit", "1000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.extend(["--data".to_owned(), data.display().to_string()]);
    args.extend(extra.split_whitespace().map(str::to_owned));
    let tmp = tempfile::tempdir().unwrap();
    println!("dashboard overhead: {pairs} pairs, data {}, args {}", data.display(), args.join(" "));
    let (mut headless, mut dashboard) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        let run = tmp.path().join(format!("headless-{i}"));
        let status = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
            .args(&args)
            .args(["--headless", "--run-dir", run.to_str().unwrap()])
            .stdout(Stdio::null())
            .status()
            .expect("dpt-tui runs");
        assert!(status.success());
        headless.push(samples_per_sec(&run));

        let run = tmp.path().join(format!("dashboard-{i}"));
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(["--run-dir", run.to_str().unwrap()]);
        let mut tui = pty::PtyRun::spawn(&all, 120, 40, &[]);
        tui.wait_for("FINISHED", Duration::from_secs(600));
        tui.send("q");
        assert!(tui.wait_exit(Duration::from_secs(60)).success());
        dashboard.push(samples_per_sec(&run));
        println!(
            "pair {}: headless {:.1} samples/s, dashboard {:.1} samples/s",
            i + 1,
            headless[i],
            dashboard[i]
        );
    }
    let (h, d) = (median(&mut headless), median(&mut dashboard));
    println!("median: headless {h:.1} samples/s, dashboard {d:.1} samples/s");
    println!("dashboard / headless = {:.3} (overhead {:+.1}%)", d / h, 100.0 * (h - d) / h);
}
