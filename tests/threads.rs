//! The threads of a training process on the CPU: a replica's OpenMP team is its own, and no
//! other thread starts one (libgomp throttles every team's spinning once the helper threads
//! of all teams outnumber the cores; `device::intra_op` has the rule and its unit tests). A
//! streamed run, whose decode threads share the cores, parks a team that keeps the spin short.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::common;
use common::Dpt;

/// How many threads of process `pid` bear each name (an OpenMP helper bears its master's).
fn thread_names(pid: u32) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let comm = std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap();
        *names.entry(comm.trim_end().to_owned()).or_default() += 1;
    }
    names
}

/// The thread names of a headless run on `data` with `flags`, once it has reported its third
/// step (three updates done: the coordinator and the replica have run all their operations).
fn names_at_third_step(data: &Path, run: &Path, flags: &[&str]) -> BTreeMap<String, usize> {
    let mut child = Dpt::new()
        .args(["--headless", "--data", data.to_str().unwrap(), "--train-limit", "600", "--test-limit", "100"])
        .args(["--batch-size", "100", "--devices", "cpu", "--log-every", "1"])
        // Long enough to be still running when its third step is reported.
        .args(["--epochs", "200"])
        .args(flags)
        .arg("--run-dir")
        .arg(run)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut steps = 0;
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.map(Result::unwrap) {
        steps += usize::from(line.contains(" step ") && line.contains(" loss "));
        if steps == 3 {
            break;
        }
    }
    let names = thread_names(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(steps, 3, "the run reported its steps: {names:?}");
    names
}

#[test]
fn only_the_replicas_threads_run_parallel_torch_operations() {
    let dir = tempfile::tempdir().unwrap();
    let names = names_at_third_step(&common::subset_dir(), &dir.path().join("run"), &["--cpu-threads", "2"]);
    assert_eq!(names.get("dpt-worker-0"), Some(&2), "the replica and its one helper: {names:?}");
    for (name, count) in &names {
        assert!(name == "dpt-worker-0" || *count == 1, "{name} has an OpenMP team: {names:?}");
    }
}

#[test]
fn a_streamed_run_keeps_the_spin_short_where_a_replica_has_a_team() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::subset(600, 100);
    let shards = dir.path().join("wds");
    common::write_shards(&shards.join("train"), &data.train, 200);
    common::write_shards(&shards.join("test"), &data.test, 100);
    let cores = std::thread::available_parallelism().unwrap().get();
    let stream = ["--model", "lenet", "--loader", "stream", "--decode-threads", "1"];
    let two = names_at_third_step(
        &shards,
        &dir.path().join("two"),
        &[&stream[..], &["--cpu-threads", "2"]].concat(),
    );
    // The parked thread and a helper per core.
    assert!(two.get("dpt-short-spin").is_some_and(|&n| n > cores), "{two:?}");
    let one = names_at_third_step(
        &shards,
        &dir.path().join("one"),
        &[&stream[..], &["--cpu-threads", "1"]].concat(),
    );
    assert_eq!(one.get("dpt-short-spin"), None, "no team to keep short: {one:?}");
}
