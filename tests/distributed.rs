//! Data parallel across processes on libtorch's c10d (Gloo on the CPU), on localhost: the same
//! weights as one process with the same replicas, torchrun, a rendezvous that times out, ranks
//! started with other settings, a rank killed mid-run (and the resume that follows), an lr
//! change given on rank 0 reaching rank 1 at the same step, and the preemption signal on one
//! rank (every rank checkpoints and exits 75; the same commands finish the run).

use crate::common;
use common::Dpt;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, ok, rel_diff, training, until};
use dpt_tui::engine::Control;
use dpt_tui::record::{Change, Record};
use tch::Tensor;

const WAIT: Duration = Duration::from_secs(120);

/// The tensors of `file` in `run`, by name.
fn tensors(run: &Path, file: &str) -> Vec<(String, Tensor)> {
    let mut w = Tensor::read_safetensors(run.join(file)).unwrap();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// Runs `world` ranks with `devices` each; returns rank 0's run directory.
fn run_world(tmp: &Path, name: &str, world: usize, devices: &str, extra: &[&str]) -> PathBuf {
    run_world_with(tmp, name, world, devices, training(extra))
}

/// Runs `world` ranks with `devices` each and the flags `args`; returns rank 0's run directory.
fn run_world_with(tmp: &Path, name: &str, world: usize, devices: &str, mut args: Vec<String>) -> PathBuf {
    let port = free_port();
    let run = tmp.join(name);
    args.extend(["--devices".to_owned(), devices.to_owned()]);
    let children: Vec<Child> = (0..world)
        .map(|r| {
            let mut c = Dpt::new();
            c.args(&args).rank(r, world, port);
            if r == 0 {
                c.arg("--run-dir").arg(&run);
            }
            c.piped().spawn()
        })
        .collect();
    for c in children {
        ok(&c.wait_with_output().unwrap());
    }
    run
}

/// Resumes `run` on `world` ranks with the flags `args` (ending in `--resume`), each one's
/// checkpoint the same file, and waits for them to succeed.
fn resume_on_ranks(world: usize, mut args: Vec<String>, run: &Path) {
    let port = free_port();
    args.push(run.to_str().unwrap().to_owned());
    let ranks: Vec<Child> =
        (0..world).map(|r| Dpt::new().args(&args).rank(r, world, port).piped().spawn()).collect();
    for r in ranks {
        ok(&r.wait_with_output().unwrap());
    }
}

fn run_alone(tmp: &Path, name: &str, devices: &str, extra: &[&str]) -> PathBuf {
    let run = tmp.join(name);
    Dpt::new().args(training(extra)).args(["--devices", devices]).run_dir(&run).ok();
    run
}

#[test]
fn two_processes_end_with_the_weights_of_one_with_as_many_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let epochs = ["--epochs", "2"];
    // 2 × cpu:1 against 1 × cpu:2: the same sums in the same order, so the same bits.
    let two = run_world(tmp.path(), "two", 2, "cpu:1", &epochs);
    let one = run_alone(tmp.path(), "one", "cpu:2", &epochs);
    assert_eq!(rel_diff(&common::weights(&two), &common::weights(&one)), 0.0);
    // 2 × cpu:2 against 1 × cpu:4: sums associated differently, float32 noise only.
    let two = run_world(tmp.path(), "two-by-two", 2, "cpu:2", &epochs);
    let one = run_alone(tmp.path(), "four", "cpu:4", &epochs);
    let d = rel_diff(&common::weights(&two), &common::weights(&one));
    assert!(d < 1e-5, "relative difference {d}");
    // Rank 0 alone owns the run directory; it records the world.
    let records = common::wait_for_summary(&two, WAIT);
    let start = records.iter().find(|r| r["kind"] == "start").unwrap();
    assert_eq!(start["world"]["replicas"], serde_json::json!([2, 2]));
    assert_eq!(start["world"]["backend"], "gloo");
    let step = records.iter().find(|r| r["kind"] == "step").unwrap();
    assert_eq!(step["replicas"].as_array().unwrap().len(), 4, "every replica of every rank is timed");
}

#[test]
fn a_gpt_on_token_data_trains_on_two_processes_as_on_one_with_as_many_replicas() {
    use common::tokens::{make_gpt, token_dir};
    let tmp = tempfile::tempdir().unwrap();
    let data = token_dir(tmp.path(), 5000);
    let gpt = make_gpt("script", tmp.path());
    let args: Vec<String> = ["--model", gpt.to_str().unwrap(), "--data", data.to_str().unwrap()]
        .into_iter()
        .chain(["--block-size", "16", "--steps", "6", "--eval-every", "3", "--batch-size", "8"])
        .chain(["--optimizer", "adamw", "--lr", "3e-3", "--headless"])
        .map(String::from)
        .collect();
    // Each rank reads only its own windows: the same windows in the same order as one process.
    let two = run_world_with(tmp.path(), "two", 2, "cpu:1", args.clone());
    let one = tmp.path().join("one");
    Dpt::new().args(&args).args(["--devices", "cpu:2"]).run_dir(&one).ok();
    assert_eq!(rel_diff(&common::weights(&two), &common::weights(&one)), 0.0);
}

#[test]
fn resnet18_batchnorm_statistics_come_from_replica_0_of_rank_0() {
    let tmp = tempfile::tempdir().unwrap();
    // Batches of 40 (20 per replica) and 20 test images: the statistics' origin, not their
    // quality, is what is checked.
    let extra = [
        "--model",
        "resnet18",
        "--max-steps",
        "2",
        "--lr",
        "0.05",
        "--batch-size",
        "40",
        "--test-limit",
        "20",
    ];
    let two = run_world(tmp.path(), "two", 2, "cpu:1", &extra);
    let one = run_alone(tmp.path(), "one", "cpu:2", &extra);
    let (a, b) = (common::weights(&two), common::weights(&one));
    let stats: Vec<&(String, Tensor)> = a.iter().filter(|(n, _)| n.contains("running_mean")).collect();
    assert!(!stats.is_empty());
    assert_eq!(rel_diff(&a, &b), 0.0, "weights and BatchNorm statistics as one process with 2 replicas");
}

#[test]
fn torchrun_starts_the_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let python =
        std::env::var("VIRTUAL_ENV").map(|v| PathBuf::from(v).join("bin/python")).unwrap_or("python3".into());
    let port = free_port().to_string();
    let torchrun =
        ["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", &port, "--no-python"];
    let text = Dpt::under(python, torchrun)
        .args(training(&["--epochs", "1", "--devices", "cpu:1"]))
        .run_dir(&run)
        .scratch_runtime()
        .ok();
    assert!(text.contains("rank 1 of 2"), "{text}");
    let records = common::wait_for_summary(&run, WAIT);
    assert_eq!(records.last().unwrap()["reason"], "completed");
}

#[test]
fn a_rank_that_never_arrives_is_named_within_the_timeout() {
    let port = free_port();
    let args = training(&["--epochs", "1", "--devices", "cpu:1", "--dist-timeout", "3"]);
    let t0 = Instant::now();
    let out = Dpt::new()
        .args(&args)
        .rank(0, 3, port)
        .arg("--run-dir")
        .arg(tempfile::tempdir().unwrap().path().join("r"))
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rank(s) [1, 2] of 3 never arrived within 3 s"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
    // A rank whose rank 0 never comes says so too.
    let out = Dpt::new().args(&args).rank(1, 2, free_port()).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot reach rank 0's store"), "{err}");
}

#[test]
fn ranks_with_other_settings_are_refused_at_the_start() {
    let port = free_port();
    let a = training(&["--epochs", "1", "--devices", "cpu:1", "--dist-timeout", "20"]);
    let mut b = a.clone();
    b.extend(["--lr".to_owned(), "0.05".to_owned()]);
    let tmp = tempfile::tempdir().unwrap();
    let r0 = Dpt::new()
        .args(&a)
        .rank(0, 2, port)
        .arg("--run-dir")
        .arg(tmp.path().join("r"))
        .stderr(Stdio::piped())
        .spawn();
    let r1 = Dpt::new().args(&b).rank(1, 2, port).stderr(Stdio::piped()).spawn();
    for child in [r0, r1] {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("rank 1") && err.contains("other settings") && err.contains("lr"), "{err}");
    }
}

#[test]
fn a_rank_killed_mid_run_stops_the_others_and_the_run_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_port();
    let args = training(&["--epochs", "6", "--devices", "cpu:1", "--dist-timeout", "20"]);
    let r0 = Dpt::new().args(&args).rank(0, 2, port).arg("--run-dir").arg(&run).piped().spawn();
    let mut r1 = Dpt::new().args(&args).rank(1, 2, port).stdout(Stdio::piped()).spawn();
    // Once rank 1 has finished its first epoch (a checkpoint exists), it is killed.
    let lines = BufReader::new(r1.stdout.take().unwrap()).lines();
    for line in lines {
        if line.unwrap().starts_with("epoch 2/6 done") {
            break;
        }
    }
    common::kill(r1.id(), "KILL");
    let _ = r1.wait();
    let t0 = Instant::now();
    let out = r0.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("rank 1 (") && err.contains("stopped answering"), "names the rank and host: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert!(run.join("checkpoint.safetensors").exists());

    // Resume: only rank 0 reads the checkpoint; rank 1 names a path that does not exist.
    let port = free_port();
    let mut resume = training(&["--devices", "cpu:1", "--resume"]);
    resume.push(run.to_str().unwrap().to_owned());
    let r0 = Dpt::new().args(&resume).rank(0, 2, port).piped().spawn();
    let elsewhere = training(&["--devices", "cpu:1", "--resume", "/nowhere/run"]);
    let r1 = Dpt::new().args(&elsewhere).rank(1, 2, port).piped().spawn();
    let text0 = ok(&r0.wait_with_output().unwrap());
    let text1 = ok(&r1.wait_with_output().unwrap());
    assert!(
        text0.contains("resumed from the checkpoint") && text1.contains("epoch 6/6 done"),
        "{text0}\n{text1}"
    );
    let records = common::wait_for_summary(&run, WAIT);
    assert_eq!(records.last().unwrap()["reason"], "completed");
}

#[test]
fn an_lr_change_on_rank_0_reaches_rank_1_at_the_same_step() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_port();
    let args =
        training(&["--epochs", "40", "--devices", "cpu:1", "--dist-timeout", "30", "--sample-ms", "200"]);
    let r0 = Dpt::new().args(&args).rank(0, 2, port).arg("--run-dir").arg(&run).stdout(Stdio::null()).spawn();
    let mut r1 = Dpt::new().args(&args).rank(1, 2, port).stdout(Stdio::piped()).spawn();
    until(WAIT, "socket served by rank 0", || dpt_tui::remote::client::server_info(&run).is_some());
    let viewer = dpt_tui::remote::client::attach(&run, false).unwrap();
    viewer.controls.send(Control::SetLr { lr: 0.05 }).unwrap();
    let at0 = loop {
        if let Record::Event(Change::LrChanged { to: 0.05, global_step, .. }) =
            viewer.records.recv_timeout(WAIT).unwrap()
        {
            break global_step;
        }
    };
    // Rank 1's device figures reach rank 0's viewers, stamped with its rank and host.
    let deadline = Instant::now() + WAIT;
    loop {
        let msg = viewer.monitor.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap();
        if let dpt_core::monitor::MonitorMsg::Samples(samples) = msg {
            if samples.iter().any(|s| s.rank == Some(1) && s.host.is_some()) {
                break;
            }
        }
    }
    viewer.controls.send(Control::Stop).unwrap();
    let mut at1 = None;
    for line in BufReader::new(r1.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("lr 0.2 -> 0.05 at step ") {
            at1 = rest.trim().parse::<usize>().ok();
        }
    }
    assert_eq!(at1, Some(at0), "rank 1 changed the lr at the step rank 0 did");
    assert!(r1.wait().unwrap().success());
    let mut r0 = r0;
    assert!(r0.wait().unwrap().success());
}

#[test]
fn a_recipe_on_two_processes_ends_with_the_weights_of_one_with_as_many_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let recipe: Vec<String> = [
        "--data",
        data.to_str().unwrap(),
        "--train-limit",
        "600",
        "--test-limit",
        "200",
        "--batch-size",
        "100",
        "--epochs",
        "2",
        "--headless",
        "--log-every",
        "2",
        "--optimizer",
        "adamw",
        "--lr",
        "0.003",
        "--weight-decay",
        "0.05",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "3",
        "--clip-grad-norm",
        "0.5",
        "--label-smoothing",
        "0.1",
        "--ema",
        "0.9",
        "--accumulate",
        "2",
        // Dynamic loss scaling, its scale growing every 2 clean steps.
        "--loss-scale",
        "on",
        "--loss-scale-init",
        "1024",
        "--loss-scale-interval",
        "2",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let two = run_world_with(tmp.path(), "two", 2, "cpu:1", recipe.clone());
    let one = tmp.path().join("one");
    Dpt::new().args(&recipe).args(["--devices", "cpu:2"]).run_dir(&one).ok();
    assert_eq!(
        rel_diff(&common::weights(&two), &common::weights(&one)),
        0.0,
        "the same sums in the same order"
    );
    let ema = |run: &Path| tensors(run, "model_ema.safetensors");
    assert_eq!(rel_diff(&ema(&two), &ema(&one)), 0.0, "and the same moving average");
}

#[test]
fn the_preemption_signal_on_one_rank_checkpoints_all_and_the_same_commands_finish_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let straight = run_world(tmp.path(), "straight", 2, "cpu:1", &["--epochs", "6"]);
    let run = tmp.path().join("run");
    let args = training(&["--epochs", "6", "--devices", "cpu:1"]);
    let start = |args: &[String], slow: bool| {
        let port = free_port();
        let r0 = Dpt::new().args(args).rank(0, 2, port).run_dir(&run).piped().spawn();
        let mut r1 = Dpt::new();
        r1.args(args).rank(1, 2, port);
        if slow {
            // Every step 50 ms longer (no number changes), so the signal lands mid-run.
            r1.env("DPT_INJECT_FAULT", "slow-replica=1@50");
        }
        (r0, r1.piped().spawn())
    };
    let (r0, mut r1) = start(&args, true);
    let mut lines = BufReader::new(r1.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().starts_with("epoch 2/6 done")));
    // Slurm signals every task; one rank alone is enough to checkpoint them all.
    common::kill(r1.id(), "USR1");
    let said: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(r1.wait().unwrap().code(), Some(75), "{}", said.join("\n"));
    let out0 = r0.wait_with_output().unwrap();
    assert_eq!(out0.status.code(), Some(75), "{}", String::from_utf8_lossy(&out0.stderr));
    assert!(run.join("checkpoint.safetensors").exists());
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(recs.last().unwrap()["reason"], "preempted");

    // The same two commands again: rank 0 continues its run directory, rank 1 follows.
    let (r0, r1) = start(&args, false);
    let text0 = ok(&r0.wait_with_output().unwrap());
    let text1 = ok(&r1.wait_with_output().unwrap());
    assert!(text0.contains("continuing the run (the same command) from step"), "{text0}");
    assert!(text1.contains("epoch 6/6 done"), "{text1}");
    let d = rel_diff(&common::weights(&straight), &common::weights(&run));
    assert!(d < 1e-6, "the continued run differs by {d}");
}

/// The process whose command line mentions `marker` and whose environment has `RANK=rank`.
fn pid_of_rank(marker: &str, rank: usize) -> Option<u32> {
    let want = format!("RANK={rank}");
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        let ours = String::from_utf8_lossy(&cmdline).contains(marker)
            && String::from_utf8_lossy(&cmdline).contains("dpt-tui")
            && !String::from_utf8_lossy(&cmdline).contains("torch.distributed.run");
        (ours && environ.split(|b| *b == 0).any(|v| v == want.as_bytes())).then_some(pid)
    })
}

#[test]
fn torchrun_restarts_a_killed_rank_and_the_same_command_finishes_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let straight = run_world(tmp.path(), "straight", 2, "cpu:1", &["--epochs", "6"]);
    let run = tmp.path().join("elastic");
    let python =
        std::env::var("VIRTUAL_ENV").map(|v| PathBuf::from(v).join("bin/python")).unwrap_or("python3".into());
    let port = free_port().to_string();
    let torchrun = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", &port];
    let child = Dpt::under(python, torchrun.iter().chain(&["--max-restarts", "1", "--no-python"]))
        .args(training(&["--epochs", "6", "--devices", "cpu:1"]))
        .run_dir(&run)
        .scratch_runtime()
        // Every step 50 ms longer (no number changes), so the kill lands mid-run.
        .env("DPT_INJECT_FAULT", "slow-replica=0@50")
        .piped()
        .spawn();
    // Once the first checkpoint exists, rank 1 dies.
    until(WAIT, "checkpoint", || run.join("checkpoint.safetensors").exists());
    let victim = pid_of_rank(run.to_str().unwrap(), 1).expect("rank 1 is running");
    common::kill(victim, "KILL");
    let text = ok(&child.wait_with_output().unwrap());
    let records = common::wait_for_summary(&run, WAIT);
    let starts: Vec<&serde_json::Value> = records.iter().filter(|r| r["kind"] == "start").collect();
    assert_eq!(starts.len(), 2, "{text}");
    assert_eq!(starts[1]["restart"], serde_json::json!({"by": "torchrun", "count": 1}));
    assert_eq!(records.last().unwrap()["reason"], "completed");
    let d = rel_diff(&common::weights(&straight), &common::weights(&run));
    assert!(d < 1e-6, "the restarted run differs by {d}");
}

#[test]
fn a_run_checkpointed_on_two_ranks_resumes_on_one_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let straight = run_world(tmp.path(), "straight", 2, "cpu:1", &["--epochs", "2"]);
    // Two ranks stop at step 5; one process with both replicas finishes the run.
    let two = run_world(tmp.path(), "two", 2, "cpu:1", &["--epochs", "2", "--max-steps", "5"]);
    let text = Dpt::new().args(training(&["--devices", "cpu:2", "--resume"])).arg(&two).ok();
    assert!(text.contains("resumed from the checkpoint at epoch 1 step 5"), "{text}");
    let d = rel_diff(&common::weights(&straight), &common::weights(&two));
    assert!(d < 1e-6, "2 ranks then 1 process differ from a straight run by {d}");
    // And back: one process stops at step 5, two ranks finish it.
    let one = run_alone(tmp.path(), "one", "cpu:2", &["--epochs", "2", "--max-steps", "5"]);
    resume_on_ranks(2, training(&["--devices", "cpu:1", "--resume"]), &one);
    let d = rel_diff(&common::weights(&straight), &common::weights(&one));
    assert!(d < 1e-6, "1 process then 2 ranks differ from a straight run by {d}");
}

#[test]
fn a_stopped_rank_is_named_by_every_other_rank_within_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_port();
    let args = training(&["--epochs", "6", "--devices", "cpu:1", "--dist-timeout", "8"]);
    let spawn = |r: usize| {
        let mut c = Dpt::new();
        c.args(&args).rank(r, 3, port);
        if r == 0 {
            c.arg("--run-dir").arg(&run);
        }
        c.piped().spawn()
    };
    let (r0, mut r1, r2) = (spawn(0), spawn(1), spawn(2));
    let mut lines = BufReader::new(r1.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().starts_with("epoch 1/6 done")));
    // Hung as a stuck kernel or a paused VM would leave it: alive, silent.
    common::kill(r1.id(), "STOP");
    let t0 = Instant::now();
    let outs = [r0.wait_with_output().unwrap(), r2.wait_with_output().unwrap()];
    let waited = t0.elapsed();
    common::kill(r1.id(), "KILL");
    let _ = r1.wait();
    let mut said = Vec::new();
    for out in &outs {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("rank 1 (") && err.contains("stopped answering"), "names the hung rank: {err}");
        said.push(err.split(": ").take(3).collect::<Vec<_>>().join(": "));
    }
    assert_eq!(said[0], said[1], "both ranks say the same");
    assert!(waited < Duration::from_secs(8 + 30), "named within the deadline: {waited:?}");
    assert!(run.join("checkpoint.safetensors").exists(), "the run stays resumable");
}

#[test]
fn ranks_started_by_hand_on_one_host_share_its_cores() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_port();
    let args = training(&["--epochs", "1", "--devices", "cpu:1"]);
    // No LOCAL_WORLD_SIZE, as the README's by-hand commands leave it: the rendezvous counts the
    // ranks on this host instead.
    let ranks: Vec<Child> = (0..2)
        .map(|r| {
            let mut c = Dpt::new();
            c.args(&args).rank(r, 2, port);
            c.env_remove("LOCAL_WORLD_SIZE");
            if r == 0 {
                c.arg("--run-dir").arg(&run);
            }
            c.piped().spawn()
        })
        .collect();
    for r in ranks {
        ok(&r.wait_with_output().unwrap());
    }
    let records = common::wait_for_summary(&run, WAIT);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(records[0]["cpu_threads_per_replica"], (cores / 2).max(1), "{}", records[0]);
}

#[test]
fn zero_1_on_two_processes_of_two_replicas_ends_with_the_weights_of_zero_0() {
    // SGD's momentum split over the run's 4 replicas, two in each process; the run's grid of
    // 4 parts cuts every update alike, sharded or not, so the weights are the same bits.
    let (start, _) = sharded_ends_as_whole("1");
    assert_eq!(start["memory"]["optimizer_shards"], 4);
}

/// Runs two processes of two CPU replicas each for 2 epochs with SGD's momentum, whole and
/// under `--zero STAGE`: checks that the weights and rank 0's checkpointed momentum (the whole
/// state, gathered from both processes' shards) are the same bits; returns the sharded and the
/// whole run's start records.
fn sharded_ends_as_whole(stage: &str) -> (serde_json::Value, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let whole = run_world(tmp.path(), "whole", 2, "cpu:2", &["--epochs", "2"]);
    let sharded = run_world(tmp.path(), "sharded", 2, "cpu:2", &["--epochs", "2", "--zero", stage]);
    assert_eq!(rel_diff(&common::weights(&whole), &common::weights(&sharded)), 0.0);
    let moments = tensors(&sharded, "checkpoint.safetensors");
    let whole_moments = tensors(&whole, "checkpoint.safetensors");
    assert!(moments.iter().any(|(n, _)| n.starts_with("momentum.")), "the momentum is checkpointed");
    for (name, t) in moments.iter().filter(|(n, _)| n.starts_with("momentum.")) {
        let (_, u) = whole_moments.iter().find(|(n, _)| n == name).expect("the same tensors");
        assert!(t.equal(u), "{name} differs from the unsharded run's");
    }
    let start = |run: &Path| {
        let records = common::wait_for_summary(run, WAIT);
        records.into_iter().find(|r| r["kind"] == "start").unwrap()
    };
    (start(&sharded), start(&whole))
}

/// Every tensor of `file` in runs `a` and `b` is the same, bit for bit (the state's record
/// aside: its settings and timings are each run's own).
fn same_tensors(a: &Path, b: &Path, file: &str) {
    let kept = |run: &Path| -> Vec<(String, Tensor)> {
        tensors(run, file).into_iter().filter(|(n, _)| !n.starts_with("__")).collect()
    };
    let (x, y) = (kept(a), kept(b));
    assert_eq!(x.len(), y.len(), "{file}: the same tensors");
    for ((n, t), (m, u)) in x.iter().zip(&y) {
        assert_eq!(n, m, "{file}: the same names");
        assert!(t.equal(u), "{file}: {n} differs");
    }
}

#[test]
fn zero_1_over_two_processes_of_one_replica_saves_the_whole_state_and_resumes_whole_in_one() {
    // Each rank holds AdamW's moments of half the weights and broadcasts its updated half.
    // Every save gathers the halves: the periodic checkpoints (rank 0's decision, every 3
    // steps), the best kept, the rewind points and the final save.
    let tmp = tempfile::tempdir().unwrap();
    // The suite's flags less SGD's momentum, which AdamW refuses.
    let adamw = |extra: &[&str]| {
        let mut args = training(&["--optimizer", "adamw", "--lr", "0.01", "--ema", "0.9", "--epochs", "2"]);
        let at = args.iter().position(|a| a == "--momentum").unwrap();
        args.drain(at..at + 2);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let saves = ["--keep-best", "1", "--checkpoint-every", "3steps"];
    let whole = run_world_with(tmp.path(), "whole", 2, "cpu:1", adamw(&saves));
    let sharded =
        run_world_with(tmp.path(), "sharded", 2, "cpu:1", adamw(&[&saves[..], &["--zero", "1"]].concat()));
    for file in ["model.safetensors", "model_ema.safetensors", "checkpoint.safetensors"] {
        same_tensors(&whole, &sharded, file);
    }
    let best = |run: &Path| {
        let kept: Vec<_> = std::fs::read_dir(run.join("best")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(kept.len(), 1, "one best kept: {kept:?}");
        kept[0].clone()
    };
    same_tensors(&best(&whole), &best(&sharded), "checkpoint.safetensors");
    let moments = tensors(&sharded, "checkpoint.safetensors");
    assert!(moments.iter().any(|(n, _)| n.starts_with("exp_avg_sq.")), "the moments are checkpointed");
    let records = common::wait_for_summary(&sharded, WAIT);
    let start = records.iter().find(|r| r["kind"] == "start").unwrap();
    assert_eq!(start["memory"]["optimizer_shards"], 2, "{}", start["memory"]);
    let taken = records.iter().filter(|r| r["event"] == "snapshot").count();
    assert!(taken > 0, "rewind points were taken (and gathered)");
    // Stopped at step 5 by two sharded ranks, finished by one process of both replicas, whole
    // (the same sums in the same order as the two ranks').
    let part = run_world_with(tmp.path(), "part", 2, "cpu:1", adamw(&["--zero", "1", "--max-steps", "5"]));
    let text = Dpt::new().args(adamw(&["--devices", "cpu:2", "--zero", "0", "--resume"])).arg(&part).ok();
    assert!(text.contains("resumed from the checkpoint at epoch 1 step 5"), "{text}");
    let d = rel_diff(&common::weights(&whole), &common::weights(&part));
    assert!(d < 1e-6, "2 sharded ranks then 1 whole process differ from a straight run by {d}");
    // And back: one whole process stops at step 5, two sharded ranks each load their half.
    let one = tmp.path().join("one");
    Dpt::new().args(adamw(&["--devices", "cpu:2", "--max-steps", "5"])).run_dir(&one).ok();
    resume_on_ranks(2, adamw(&["--devices", "cpu:1", "--zero", "1", "--resume"]), &one);
    let d = rel_diff(&common::weights(&whole), &common::weights(&one));
    assert!(d < 1e-6, "1 whole process then 2 sharded ranks differ from a straight run by {d}");
}

#[test]
fn zero_2_on_two_processes_of_two_replicas_ends_with_the_weights_of_zero_0() {
    // SGD's momentum and the gradient sums split over the run's 4 replicas, two in each
    // process: each bucket's local sum is reduced to the rank whose block it meets. Two ranks
    // add the same two values whichever way they go, so the weights are the same bits.
    let (start, whole_start) = sharded_ends_as_whole("2");
    assert_eq!(start["memory"]["optimizer_shards"], 4);
    assert_eq!(start["memory"]["gradient_shards"], 4);
    let gradients = |r: &serde_json::Value| r["memory"]["gradients"].as_u64().unwrap();
    // 129,216 f32 sums (129,068 values and the pads that align each tensor) over 4 replicas: a
    // quarter each.
    assert_eq!(gradients(&start), gradients(&whole_start) / 4);
    // Beside them, a step's bucket buffers: one bucket here (under DDP's first 1 MiB), the whole
    // buffer but the pad after its last tensor (under 256 bytes).
    let buckets = start["memory"]["bucket_buffers"].as_u64().unwrap();
    assert!(buckets <= gradients(&whole_start) && buckets + 256 > gradients(&whole_start), "{buckets}");
    assert!(whole_start["memory"].get("bucket_buffers").is_none(), "none kept whole");
}

#[test]
fn zero_2_with_adamw_clipping_and_accumulation_moves_its_checkpoint_from_2_ranks_to_1_and_to_3() {
    // The clipping norm is summed from every shard's squares over the ranks (another order
    // than the whole gradient's); the rest is the unsharded run's arithmetic.
    let tmp = tempfile::tempdir().unwrap();
    let adamw = |extra: &[&str]| {
        let mut args = training(&[
            "--optimizer",
            "adamw",
            "--lr",
            "0.01",
            "--clip-grad-norm",
            "0.5",
            "--accumulate",
            "2",
            "--epochs",
            "2",
        ]);
        let at = args.iter().position(|a| a == "--momentum").unwrap();
        args.drain(at..at + 2);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let whole = run_world_with(tmp.path(), "whole", 2, "cpu:1", adamw(&[]));
    let sharded = run_world_with(tmp.path(), "sharded", 2, "cpu:1", adamw(&["--zero", "2"]));
    let d = rel_diff(&common::weights(&whole), &common::weights(&sharded));
    // 4e-6 seen: the clip coefficient moves in its last bits, and AdamW carries that on.
    assert!(d < 1e-5, "--zero 2 differs from --zero 0 by {d}");
    // 2 sharded ranks stop at step 5, one whole process of two replicas goes on to step 9, and
    // 3 sharded ranks finish: each loads the whole state saved and keeps its part.
    let part = run_world_with(tmp.path(), "part", 2, "cpu:1", adamw(&["--zero", "2", "--max-steps", "5"]));
    let text = Dpt::new()
        .args(adamw(&["--devices", "cpu:2", "--zero", "0", "--max-steps", "9", "--resume"]))
        .arg(&part)
        .ok();
    assert!(text.contains("resumed from the checkpoint at epoch 1 step 5"), "{text}");
    resume_on_ranks(3, adamw(&["--devices", "cpu:1", "--zero", "2", "--resume"]), &part);
    let d = rel_diff(&common::weights(&whole), &common::weights(&part));
    assert!(d < 1e-5, "2 sharded ranks, 1 whole process, 3 sharded ranks differ from a straight run by {d}");
    let records = common::wait_for_summary(&part, WAIT);
    let last_start = records.iter().rev().find(|r| r["kind"] == "start").unwrap();
    assert_eq!(last_start["memory"]["gradient_shards"], 3, "{}", last_start["memory"]);
}

#[test]
fn a_save_asked_of_rank_0_under_zero_1_gathers_the_state_of_every_rank() {
    // The `s` key reaches rank 0 alone; the ranks agree on the save at the next boundary and
    // all send their shards, so rank 0 writes the whole momentum and the run goes on. The
    // periodic checkpoints go by rank 0's clock, which it tells the others after every step.
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_port();
    let args = training(&[
        "--epochs",
        "40",
        "--devices",
        "cpu:1",
        "--zero",
        "1",
        "--dist-timeout",
        "30",
        "--checkpoint-every",
        "1s",
    ]);
    let r0 = Dpt::new().args(&args).rank(0, 2, port).arg("--run-dir").arg(&run).stdout(Stdio::null()).spawn();
    let r1 = Dpt::new().args(&args).rank(1, 2, port).stdout(Stdio::null()).spawn();
    until(WAIT, "socket served by rank 0", || dpt_tui::remote::client::server_info(&run).is_some());
    let viewer = dpt_tui::remote::client::attach(&run, false).unwrap();
    // After a step, so that every half of the momentum has moved.
    while !matches!(viewer.records.recv_timeout(WAIT).unwrap(), Record::Step(_)) {}
    viewer.controls.send(Control::SaveNow).unwrap();
    let at = loop {
        if let Record::Event(Change::Checkpointed { global_step, .. }) =
            viewer.records.recv_timeout(WAIT).unwrap()
        {
            break global_step;
        }
    };
    let saved = tensors(&run, "checkpoint.safetensors");
    let weights = tensors(&run, "model.safetensors");
    for (name, w) in &weights {
        let (_, m) =
            saved.iter().find(|(n, _)| *n == format!("momentum.{name}")).expect("every tensor's momentum");
        assert_eq!(m.size(), w.size(), "momentum.{name} is whole");
    }
    // Both halves are there: the momentum after steps is nowhere all zero over a half.
    let flat = Tensor::cat(
        &saved
            .iter()
            .filter(|(n, _)| n.starts_with("momentum."))
            .map(|(_, t)| t.flatten(0, -1))
            .collect::<Vec<_>>(),
        0,
    );
    let half = flat.size()[0] / 2;
    assert!(at > 0, "saved after a step");
    for part in [flat.narrow(0, 0, half), flat.narrow(0, half, half)] {
        assert!(part.abs().sum(tch::Kind::Double).double_value(&[]) > 0.0, "a half of the momentum is empty");
    }
    // A clock's checkpoint later: every rank followed rank 0's decision and gathered it.
    loop {
        if let Record::Event(Change::Checkpointed { global_step, .. }) =
            viewer.records.recv_timeout(WAIT).unwrap()
        {
            if global_step > at {
                break;
            }
        }
    }
    viewer.controls.send(Control::Stop).unwrap();
    for mut r in [r0, r1] {
        assert!(r.wait().unwrap().success());
    }
}
