//! Benchmark: dpt-tui's streaming loader against PyTorch's `DataLoader` on the same JPEG folder
//! and cores, run in alternation.
//!
//! `source .ci/env.sh && cargo bench --bench loader` writes a folder of JPEGs (Python's PIL,
//! `loader_reference.py make`), then per round: images/s of the loader alone (ours: one
//! replica's loader thread and `BENCH_THREADS` decode threads through one epoch of
//! `RandomResizedCrop(224)` + flip; theirs: torchvision `ImageFolder` with the same transforms
//! through a `DataLoader` of `BENCH_THREADS` worker processes, pinned memory), and images/s of
//! a small model's training fed by each (`dpt-tui --loader stream --augment imagenet` on one
//! CPU replica; the same model in PyTorch). Environment: `BENCH_IMAGES` (2000), `BENCH_SIZE`
//! (the images' `W,H`, 400,300), `BENCH_ROUNDS` (3), `BENCH_THREADS` (the cores), `BENCH_BATCH`
//! (128), `PYTHON` (default: the set-up's virtualenv).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use dpt_tui::data::{Dataset, LoadOptions, Loader as LoaderChoice};
use dpt_tui::engine::TrainConfig;
use dpt_tui::input::augment::Preset;
use dpt_tui::input::loader::{Decoding, Job, Loader};
use dpt_tui::input::shard::{epoch_order, replica_rows};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Images/s of one epoch through one replica's streaming loader.
fn our_loader(folder: &Path, threads: usize, batch: usize) -> f64 {
    let options =
        LoadOptions { loader: LoaderChoice::Stream, image_size: Some((224, 224)), ..LoadOptions::default() };
    let data = Arc::new(Dataset::load_with(folder, options).expect("the folder indexes"));
    let mut cfg = TrainConfig::new(dpt_tui::model::ModelKind::Script, vec![dpt_core::device::DeviceId::Cpu]);
    cfg.settings.recipe.augment = Some(Preset::Imagenet);
    cfg.loader.decode_threads = threads;
    cfg.loader.prefetch = 2;
    let decoding = Decoding::for_run(cfg.decoding(), &data).unwrap().expect("streamed");
    let mut loader = Loader::start(decoding, 0, tch::Device::Cpu).unwrap();
    let n = data.train.len();
    let steps = n.div_ceil(batch);
    let start = Instant::now();
    let order = Arc::new(epoch_order(0, 0, n));
    loader.submit(Job::Train { epoch: 0, order, steps: replica_rows(0, steps, (batch, n), (0, 1)) }).unwrap();
    let mut seen = 0;
    for _ in 0..steps {
        seen += loader.next().unwrap().ids.len();
    }
    seen as f64 / start.elapsed().as_secs_f64()
}

fn python(python: &str, args: &[&str]) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/benches/loader_reference.py");
    let out = Command::new(python).arg(script).args(args).output().expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_default()
}

/// Images/s of one epoch of dpt-tui training the pooled model on one CPU replica.
fn our_training(folder: &Path, model: &Path, threads: usize, batch: usize, run: &Path) -> f64 {
    let out = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .args(["--headless", "--devices", "cpu:1", "--cpu-threads", "1", "--epochs", "1"])
        .args(["--loader", "stream", "--augment", "imagenet", "--checkpoint-every", "0"])
        .args(["--decode-threads", &threads.to_string(), "--batch-size", &batch.to_string()])
        .args(["--normalize", "0.5,0.25", "--model", model.to_str().unwrap()])
        .arg("--data")
        .arg(folder)
        .arg("--run-dir")
        .arg(run)
        .output()
        .expect("dpt-tui runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    summary["samples_per_sec"].as_f64().expect("samples_per_sec")
}

fn main() {
    let py = std::env::var("PYTHON")
        .or_else(|_| std::env::var("DPT_VENV").map(|v| format!("{v}/bin/python")))
        .unwrap_or_else(|_| "python3".to_owned());
    let images = env_or("BENCH_IMAGES", "2000");
    let size = env_or("BENCH_SIZE", "400,300");
    let (w, h) = size.split_once(',').expect("BENCH_SIZE is W,H");
    let rounds: usize = env_or("BENCH_ROUNDS", "3").parse().expect("BENCH_ROUNDS");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads: usize = env_or("BENCH_THREADS", &cores.to_string()).parse().expect("BENCH_THREADS");
    let batch: usize = env_or("BENCH_BATCH", "128").parse().expect("BENCH_BATCH");
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("jpeg");
    python(&py, &["make", folder.to_str().unwrap(), &images, w, h]);
    let model = tmp.path().join("pooled3.pt");
    let made = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/make_model.py"))
        .args(["pooled", model.to_str().unwrap(), "3"])
        .status()
        .expect("python runs");
    assert!(made.success());
    println!(
        "loader benchmark: {images} JPEGs of {w}x{h}, RandomResizedCrop(224) + flip, batch {batch}, {threads} decode threads / DataLoader workers, {rounds} rounds"
    );
    let (t, b) = (threads.to_string(), batch.to_string());
    let args = |mode: &'static str| [mode, folder.to_str().unwrap(), &t, &b, "224"].map(str::to_owned);
    let mut columns: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds {
        let theirs = |mode| {
            python(&py, &args(mode).each_ref().map(String::as_str))["images_per_sec"].as_f64().unwrap()
        };
        let run = tmp.path().join(format!("run-{round}"));
        let row = if round % 2 == 0 {
            let ours =
                [our_loader(&folder, threads, batch), our_training(&folder, &model, threads, batch, &run)];
            [ours[0], theirs("load"), ours[1], theirs("train")]
        } else {
            let theirs = [theirs("load"), theirs("train")];
            [
                our_loader(&folder, threads, batch),
                theirs[0],
                our_training(&folder, &model, threads, batch, &run),
                theirs[1],
            ]
        };
        println!(
            "round {}: loader alone dpt-tui {:.0} images/s, DataLoader {:.0}; training dpt-tui {:.0}, PyTorch {:.0}",
            round + 1,
            row[0],
            row[1],
            row[2],
            row[3]
        );
        for (c, v) in columns.iter_mut().zip(row) {
            c.push(v);
        }
    }
    let m: Vec<f64> = columns.iter().map(|c| median(c)).collect();
    println!("\n| | dpt-tui images/s | DataLoader images/s | ratio |");
    println!("| --- | --- | --- | --- |");
    println!("| loader alone | {:.0} | {:.0} | {:.2}x |", m[0], m[1], m[0] / m[1]);
    println!("| training (pooled linear model) | {:.0} | {:.0} | {:.2}x |", m[2], m[3], m[2] / m[3]);
}
