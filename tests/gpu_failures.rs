//! GPU failures a CPU can stand in for: running out of memory is said in one line with the way
//! out, and the last checkpoint is kept; a set-up that never returns fails at its deadline and
//! the process leaves (with `_exit`, past the thread still inside it).

use crate::common;
use common::Dpt;

use dpt_tui::persist::checkpoint::Checkpoint;

#[test]
fn out_of_memory_says_what_ran_out_and_keeps_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = Dpt::new()
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
        .output();
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

#[test]
fn a_set_up_that_never_returns_fails_at_the_deadline_and_the_process_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let started = std::time::Instant::now();
    // The helper thread stays inside the set-up, as in NCCL on a machine with PCIe ACS on.
    let out = Dpt::new()
        .args(["--headless", "--devices", "cpu:2", "--epochs", "1", "--step-timeout", "2"])
        .args(["--data", common::subset_dir().to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .env("DPT_INJECT_FAULT", "setup-hang")
        .output();
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line, written before leaving: {stderr}");
    assert!(stderr.contains("NCCL's communicator set-up on cpu,cpu did not finish within 2 s"), "{stderr}");
    assert!(stderr.contains("NCCL_P2P_DISABLE=1"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to resume"), "{out:?}");
    assert!(waited < std::time::Duration::from_secs(30), "it left after the deadline: {waited:?}");
}
