//! Benchmark: a GPT trained by dpt-tui against the same GPT trained by a plain PyTorch loop
//! (`tests/benches/lm_reference.py`: eager, nanoGPT's get_batch and AdamW) on the same token
//! file, the same machine and the same `torch==2.11.0`, run in alternation.
//!
//! `source .ci/env.sh && cargo bench --bench lm_vs_pytorch` prints each round's tokens/s and
//! the medians' ratio dpt-tui / PyTorch. The model is `assets/pytorch/gpt.py`'s architecture at
//! vocabulary 256 (bytes), block 128, width 128, 4 layers, 4 heads (about 0.8 M parameters),
//! batch 16 windows. Environment: `BENCH_ROUNDS` (3), `BENCH_STEPS` (40), `BENCH_THREADS` (2:
//! dpt-tui one replica with that many intra-op threads, PyTorch `torch.set_num_threads`),
//! `PYTHON` (default: the set-up's virtualenv).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const VOCAB: usize = 256;
const BLOCK: usize = 128;
const WIDTH: usize = 128;
const LAYERS: usize = 4;
const HEADS: usize = 4;
const BATCH: usize = 16;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 2 M tokens below `VOCAB`, from a fixed stream.
fn write_tokens(dir: &Path) {
    let mut x = 7u64;
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 33) % VOCAB as u64) as u16
    };
    for (name, n) in [("train.bin", 2_000_000), ("val.bin", 100_000)] {
        let bytes: Vec<u8> = (0..n).flat_map(|_| next().to_le_bytes()).collect();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

fn main() {
    let rounds: usize = env_or("BENCH_ROUNDS", "3").parse().expect("BENCH_ROUNDS");
    let steps = env_or("BENCH_STEPS", "40");
    let threads = env_or("BENCH_THREADS", "2");
    let python = std::env::var("PYTHON")
        .or_else(|_| std::env::var("DPT_VENV").map(|v| format!("{v}/bin/python")))
        .unwrap_or_else(|_| "python3".to_owned());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens");
    std::fs::create_dir_all(&data).unwrap();
    write_tokens(&data);
    let model = tmp.path().join("gpt.pt");
    let shape = [VOCAB, BLOCK, WIDTH, LAYERS, HEADS].map(|v| v.to_string());
    let made = Command::new(&python)
        .arg(root.join("assets/pytorch/gpt.py"))
        .args([
            "make",
            model.to_str().unwrap(),
            &shape[0],
            &shape[1],
            "script",
            &shape[2],
            &shape[3],
            &shape[4],
        ])
        .status()
        .expect("python runs");
    assert!(made.success(), "gpt.py make");
    println!(
        "GPT (vocab {VOCAB}, block {BLOCK}, width {WIDTH}, {LAYERS} layers, {HEADS} heads), batch {BATCH}, {steps} steps, {threads} threads: dpt-tui (one CPU replica) vs a plain PyTorch loop, {rounds} rounds"
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let run_ours = |ours: &mut Vec<f64>| {
            let run = tmp.path().join(format!("run-{round}"));
            let out = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
                .args(["--headless", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()])
                .args([
                    "--block-size",
                    &shape[1],
                    "--steps",
                    &steps,
                    "--eval-every",
                    &steps,
                    "--eval-batches",
                    "1",
                ])
                .args(["--batch-size", &BATCH.to_string(), "--optimizer", "adamw", "--lr", "1e-3"])
                .args(["--betas", "0.9,0.95", "--weight-decay", "0.1", "--clip-grad-norm", "1"])
                .args(["--devices", "cpu", "--cpu-threads", &threads, "--checkpoint-every", "0"])
                .arg("--run-dir")
                .arg(&run)
                .output()
                .expect("dpt-tui runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
            let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            ours.push(summary["samples_per_sec"].as_f64().expect("samples_per_sec") * BLOCK as f64);
        };
        let run_theirs = |theirs: &mut Vec<f64>| {
            let out = Command::new(&python)
                .arg(root.join("tests/benches/lm_reference.py"))
                .arg(&data)
                .args(&shape)
                .args([BATCH.to_string(), steps.clone(), threads.clone()])
                .output()
                .expect("python runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line");
            let v: Value = serde_json::from_str(line).unwrap();
            theirs.push(v["tokens_per_sec"].as_f64().expect("tokens_per_sec"));
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
            "round {}: dpt-tui {:.0} tokens/s, PyTorch {:.0} tokens/s",
            round + 1,
            ours[round],
            theirs[round]
        );
    }
    let (o, t) = (median(&ours), median(&theirs));
    let pair: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a / b).collect();
    println!("\n| dpt-tui tokens/s | PyTorch tokens/s | ratio of medians | median pair ratio |");
    println!("| --- | --- | --- | --- |");
    println!("| {o:.0} | {t:.0} | {:.2}x | {:.2}x |", o / t, median(&pair));
}
