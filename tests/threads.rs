//! The threads of a training process on the CPU: a replica's OpenMP team is its own, and no
//! other thread starts one (libgomp throttles every team's spinning once the helper threads
//! of all teams outnumber the cores; `device::intra_op` has the rule and its unit tests).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common;

/// How many threads of process `pid` bear each name (an OpenMP helper bears its master's).
fn thread_names(pid: u32) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let comm = std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap();
        *names.entry(comm.trim_end().to_owned()).or_default() += 1;
    }
    names
}

#[test]
fn only_the_replicas_threads_run_parallel_torch_operations() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Long enough to be still running when its third step is reported.
    let args =
        common::training(&["--devices", "cpu", "--cpu-threads", "2", "--epochs", "200", "--log-every", "1"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .args(&args)
        .arg("--run-dir")
        .arg(&run)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut steps = 0;
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.map(Result::unwrap) {
        // Three updates done: the coordinator and the replica have run all their operations.
        steps += usize::from(line.contains(" step ") && line.contains(" loss "));
        if steps == 3 {
            break;
        }
    }
    let names = thread_names(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(steps, 3, "the run reported its steps");
    assert_eq!(names.get("dpt-worker-0"), Some(&2), "the replica and its one helper: {names:?}");
    for (name, count) in &names {
        assert!(name == "dpt-worker-0" || *count == 1, "{name} has an OpenMP team: {names:?}");
    }
}
