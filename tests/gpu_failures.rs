//! GPU failures a CPU can stand in for: running out of memory is said in one line with the way
//! out, and the last checkpoint is kept.

mod common;

use std::process::Command;

use dpt_tui::persist::checkpoint::Checkpoint;

#[test]
fn out_of_memory_says_what_ran_out_and_keeps_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .args(["--headless", "--devices", "cpu:2", "--epochs", "3", "--batch-size", "64"])
        .args([
            "--data",
            common::subset_dir().to_str().unwrap(),
            "--train-limit",
            "256",
            "--test-limit",
            "64",
        ])
        .args(["--run-dir", run.to_str().unwrap()])
        .env("DPT_INJECT_FAULT", "worker-oom=1@6")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().rfind(|l| l.contains("out of GPU memory")).expect(&stderr);
    for needle in [
        "out of GPU memory on cpu (replica 1, 32 samples per replica, 2 replica(s) on that GPU)",
        "it asked for 2.00 GiB more, 7.75 MiB of 79.19 GiB free, PyTorch reserves 77.10 GiB",
        "checkpoint.safetensors, is kept: --resume it",
        "rerun with a smaller --batch-size, or fewer than 2 replicas on that GPU",
    ] {
        assert!(line.contains(needle), "{needle}\n{line}");
    }
    assert!(!line.contains("CUDA out of memory"), "the allocator's text is summed up: {line}");
    // The checkpoint of epoch 1 (4 steps) is intact.
    let ckpt = Checkpoint::read(&run).unwrap();
    assert_eq!(ckpt.state.global_step, 4);
}
