//! Signals on the real binary: SIGINT and SIGTERM stop at a step boundary, save a checkpoint,
//! say how to resume and exit 130 / 143; SIGHUP never kills training, headless or in the
//! dashboard. Then the run is resumed from its directory.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{records, Dpt};

/// Starts a long headless run, waits for its first progress line, sends the signals in turn.
fn interrupt(run: &Path, signals: &[&str]) -> (Option<i32>, String) {
    let data = common::subset_dir();
    let mut child = Dpt::new()
        .args(["--data", data.to_str().unwrap(), "--devices", "cpu:2", "--epochs", "400", "--log-every", "2"])
        .args(["--train-limit", "600", "--batch-size", "100", "--run-dir", run.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line.starts_with("epoch 2/400 done") {
            break;
        }
    }
    for s in signals {
        common::kill(child.id(), s);
    }
    for line in lines {
        out.push_str(&line.unwrap());
        out.push('\n');
    }
    (child.wait().unwrap().code(), out)
}

#[test]
fn sigint_stops_saves_and_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // SIGHUP first: headless, it is ignored; then SIGINT stops.
    let (code, out) = interrupt(&run, &["HUP", "INT"]);
    assert_eq!(code, Some(130), "{out}");
    assert!(
        out.contains(&format!("stopped by SIGINT; resume with: dpt-tui --resume {}", run.display())),
        "{out}"
    );
    assert!(run.join("checkpoint.safetensors").exists() && run.join("model.safetensors").exists());
    let recs = records(&run);
    assert!(recs.iter().any(|r| r["event"] == "stop_requested"));
    assert_eq!(recs.last().unwrap()["reason"], "stopped");

    // Resume from the run directory; it continues there, to a new epoch count.
    let out = Dpt::new()
        .args([
            "--data",
            common::subset_dir().to_str().unwrap(),
            "--devices",
            "cpu:2",
            "--train-limit",
            "600",
        ])
        .args(["--resume", run.to_str().unwrap(), "--epochs", "4"])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("resumed from the checkpoint at epoch"), "{stdout}");
    assert!(stdout.contains("epoch 4/4 done"), "{stdout}");
    let recs = records(&run);
    assert!(recs.iter().any(|r| r["event"] == "restored"));
    assert_eq!(recs.last().unwrap()["reason"], "completed");
    // The history of the whole run comes back from metrics.jsonl: every epoch once, the
    // curves continuous from the first step, as `show` and an attaching viewer see them.
    let history = dpt_tui::record::history::History::read(&run).unwrap();
    let epochs: Vec<usize> = history
        .records()
        .iter()
        .filter_map(|r| if let dpt_tui::record::Record::Epoch(e) = r { Some(e.epoch) } else { None })
        .collect();
    assert_eq!(epochs, vec![1, 2, 3, 4], "each epoch once, in order");
    let curves = dpt_tui::record::curves::Curves::of(history.records());
    assert!(curves.train_loss.first().is_some_and(|p| p.0 < 1.0), "curves start in epoch 1");
    assert!(curves.train_loss.windows(2).all(|w| w[0].0 < w[1].0), "no point repeated after the resume");
}

#[test]
fn sigterm_exits_143_with_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let (code, out) = interrupt(&run, &["TERM"]);
    assert_eq!(code, Some(143), "{out}");
    assert!(out.contains("stopped by SIGTERM"), "{out}");
    assert!(run.join("checkpoint.safetensors").exists());
}

#[test]
fn sighup_closes_the_dashboard_and_training_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut tui = common::train_in_pty(
        &run,
        &["--devices", "cpu:2", "--epochs", "12", "--train-limit", "600", "--batch-size", "100"],
        100,
        30,
        &[],
    );
    tui.wait_for("RUNNING", Duration::from_secs(60));
    common::kill(tui.pid(), "HUP");
    // The dashboard leaves; the job, in a session of its own, goes on and finishes.
    let status = tui.wait_exit(Duration::from_secs(120));
    assert!(status.success(), "{status:?}\n{}", tui.contents());
    let recs = common::wait_for_summary(&run, Duration::from_secs(120));
    let summary = recs.last().unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["reason"], "completed", "the run finished after the hang-up");
    assert_eq!(recs.iter().filter(|r| r["kind"] == "epoch").count(), 12);
    assert!(run.join("checkpoint.safetensors").exists());
}

#[test]
fn bad_resume_input_is_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let d = data.to_str().unwrap();
    let garbage = tmp.path().join("checkpoint.safetensors");
    std::fs::write(&garbage, b"\x00\x01 not a checkpoint").unwrap();
    for (args, needle) in [
        (vec!["--resume", garbage.to_str().unwrap()], "cannot read checkpoint"),
        (vec!["--resume", "/no/such/run"], "cannot read checkpoint"),
    ] {
        let out = Dpt::new().args(["--data", d]).args(&args).output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // A real checkpoint of lenet, resumed as mnist-net.
    let run = tmp.path().join("run");
    let out = Dpt::new()
        .args(["--data", d, "--train-limit", "200", "--max-steps", "1", "--run-dir", run.to_str().unwrap()])
        .output();
    assert!(out.status.success());
    let out = Dpt::new()
        .args([
            "--data",
            d,
            "--train-limit",
            "200",
            "--model",
            "mnist-net",
            "--resume",
            run.to_str().unwrap(),
        ])
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("belongs to model 'lenet', not 'mnist-net'"), "{err}");
    let out =
        Dpt::new().args(["--data", d, "--train-limit", "300", "--resume", run.to_str().unwrap()]).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("trained on 200 samples"), "{err}");
}
