//! End to end: the real binary in a pseudo-terminal on the shipped subset. Pause, set the lr
//! through the prompt, resume, quit; the screen and metrics.jsonl must show each of them. The
//! status panel says what limits the step.

use crate::common;
use common::Dpt;

use std::time::Duration;

use common::pty::PtyRun;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn pause_set_lr_and_quit_in_a_real_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut tui = common::train_in_pty(
        &run,
        &["--devices", "cpu:2", "--epochs", "500", "--log-every", "2", "--sample-ms", "200"],
        100,
        30,
        &[],
    );
    tui.wait_for("RUNNING", WAIT);
    tui.wait_for("train loss", WAIT);

    tui.send("p");
    let screen = tui.wait_for("PAUSED", WAIT);
    assert!(screen.contains("paused at step"), "{screen}");

    tui.send("l");
    tui.wait_for("set the learning rate", WAIT);
    tui.send("x1\r");
    tui.wait_for("'x1' is not a positive finite number", WAIT);
    tui.send("\x7f\x7f0.05\r");
    let screen = tui.wait_for("lr 0.2 -> 0.05", WAIT);
    assert!(screen.contains("lr 0.05"), "status shows the new lr:\n{screen}");

    tui.send(" ");
    tui.wait_for("resumed at step", WAIT);
    tui.wait_for("RUNNING", WAIT);

    tui.send("?");
    tui.wait_for("pause or resume training", WAIT);
    // `?` closes the help too (a lone Esc followed at once by `q` would read as Alt-q).
    tui.send("?");

    tui.send("q");
    tui.wait_for("Stop after the current step and save the weights?", WAIT);
    tui.send("y");
    let status = tui.wait_exit(WAIT);
    assert!(status.success(), "{status:?}");
    let screen = tui.contents();
    assert!(
        screen.contains("speed: ") && screen.contains("run directory:"),
        "summary after leaving:\n{screen}"
    );

    let events: Vec<Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let has = |event: &str| events.iter().any(|r| r["kind"] == "event" && r["event"] == event);
    for e in ["paused", "lr_changed", "resumed", "stop_requested", "saved"] {
        assert!(has(e), "metrics.jsonl lacks a {e} event");
    }
    assert!(events.iter().any(|r| r["event"] == "lr_changed" && r["to"] == 0.05));
    let summary = events.last().unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["reason"], "stopped");
    assert!(run.join("model.safetensors").exists());
}

#[test]
fn rewind_with_r_in_a_real_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Reports every 7 steps, points every 4: the run is paused between reports.
    let flags = ["--devices", "cpu:2", "--epochs", "500", "--log-every", "7", "--snapshot-every", "4steps"];
    let mut tui = common::train_in_pty(&run, &flags, 100, 30, &[]);
    tui.wait_for("RUNNING", WAIT);
    tui.wait_for("train loss", WAIT);
    // Paused by the user first: the rewind resumes the run.
    tui.send("p");
    tui.wait_for("PAUSED", WAIT);
    tui.send("r");
    tui.wait_for("go back to:", WAIT);
    // The oldest of the points, the half lr offered, and the batches since skipped.
    tui.send("\x1b[A\x1b[A\r");
    tui.wait_for("half offered", WAIT);
    tui.send("\r");
    let skips = batches_the_dialog_skips(&tui.wait_for("since then?", WAIT));
    tui.send("y");
    let screen = tui.wait_for("rewound from step", WAIT);
    assert!(screen.contains("lr 0.1"), "the half lr:\n{screen}");
    tui.wait_for("RUNNING", WAIT);
    tui.send("q");
    tui.wait_for("Stop after the current step", WAIT);
    tui.send("y");
    assert!(tui.wait_exit(WAIT).success());
    let records = common::records(&run);
    let rewound = records.iter().find(|r| r["event"] == "rewound").expect("a rewound record");
    assert_eq!(rewound["lr"], 0.1);
    assert!(rewound["skipped"].as_u64().unwrap() > 0, "{rewound}");
    assert_eq!(rewound["skipped"].as_u64(), Some(skips), "the dialog said what the run skipped: {rewound}");
    let to = rewound["to"].as_u64().unwrap();
    let next = records.iter().skip_while(|r| r["event"] != "rewound").find(|r| r["kind"] == "step").unwrap();
    assert!(next["global_step"].as_u64().unwrap() > to && next["lr"] == 0.1, "{next}");
}

/// The batches the rewind dialog on `screen` says it skips: `skip the N batch(es) since
/// then?`, or the offer after a loss that is not finite, `skipping N batch(es)?`.
fn batches_the_dialog_skips(screen: &str) -> u64 {
    let said = ["skip the ", "skipping "].iter().find_map(|w| screen.split_once(w).map(|(_, rest)| rest));
    let count = said.and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.parse().ok());
    count.unwrap_or_else(|| panic!("the dialog says how many batches it skips:\n{screen}"))
}

/// How long a person takes to read the screen and press the next key: the pace the rewind
/// dialog has to stand on a fast run. Each key is pressed once the screen shows what it answers;
/// this is the reading on top.
const THINK: Duration = Duration::from_millis(700);

/// The rewind list on `screen`: where its first line says the run is, and the steps listed.
fn rewind_list(screen: &str) -> (String, Vec<usize>) {
    let lines: Vec<&str> = screen.lines().collect();
    let first = lines.iter().position(|l| l.contains("go back to:")).expect("the list is shown");
    let line = lines[first];
    let byte = ["paused at step", "now at step"].iter().find_map(|w| line.find(w)).expect("where the run is");
    // The dialog's lines begin in the column its first one does.
    let column = line[..byte].chars().count();
    let steps = lines[first + 2..]
        .iter()
        .map(|l| l.chars().skip(column).take(12).collect::<String>())
        .map_while(|cell| cell.trim().parse().ok())
        .collect();
    (line[byte..].split(';').next().unwrap_or_default().to_owned(), steps)
}

#[test]
fn rewind_at_a_human_pace_on_a_fast_run_lands_on_the_point_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Batches of 32 on one CPU replica: steps of a few milliseconds, a point every 20 of them
    // (three kept), so a run left going would replace every point listed within a second.
    let flags = [
        "--devices",
        "cpu",
        "--epochs",
        "500",
        "--train-limit",
        "2048",
        "--test-limit",
        "128",
        "--batch-size",
        "32",
        "--snapshot-every",
        "20steps",
    ];
    let think = || std::thread::sleep(THINK);
    let mut tui = common::train_in_pty(&run, &flags, 100, 30, &[]);
    // Three points kept by the second epoch (64 steps an epoch).
    tui.wait_for("epoch 2/500", WAIT);
    think();
    tui.send("r");
    // The run waits while the list is open, and the list says the step it waits at.
    let paused = |s: &str| s.lines().any(|l| l.contains("paused at step") && l.contains("go back to:"));
    let (at, listed) = rewind_list(&tui.wait_until("the list of a paused run", paused, WAIT));
    assert_eq!(listed.len(), 3, "{at}: {listed:?}");
    let held: usize = at.trim_start_matches("paused at step ").split(',').next().unwrap().parse().unwrap();
    assert!(held >= listed[2], "the run is past its newest point: {at}: {listed:?}");
    think();
    assert_eq!(rewind_list(&tui.contents()), (at.clone(), listed.clone()), "the list stays as shown");
    // The oldest point, the half lr offered, the batches since skipped.
    for key in ["\x1b[A", "\x1b[A", "\r"] {
        tui.send(key);
        think();
    }
    tui.wait_for(&format!("back to step {};", listed[0]), WAIT);
    think();
    tui.send("\r");
    let skips = batches_the_dialog_skips(&tui.wait_for("since then?", WAIT));
    think();
    tui.send("y");
    let screen = tui.wait_for_any(&["rewound from step", "refused", "no longer kept"], WAIT);
    assert!(screen.contains(&format!("rewound from step {held} to step {}", listed[0])), "{screen}");
    tui.wait_for("RUNNING", WAIT);
    tui.send("q");
    tui.wait_for("Stop after the current step", WAIT);
    tui.send("y");
    assert!(tui.wait_exit(WAIT).success());

    let records = common::records(&run);
    let rewound = records.iter().find(|r| r["event"] == "rewound").expect("a rewound record");
    assert_eq!(
        (rewound["from"].as_u64(), rewound["to"].as_u64()),
        (Some(held as u64), Some(listed[0] as u64))
    );
    assert_eq!(rewound["skipped"].as_u64(), Some(skips), "the dialog said what the run skipped: {rewound}");
    assert!(!records.iter().any(|r| r["event"] == "refused"), "nothing refused");
    let paused: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "paused").collect();
    assert_eq!(paused.len(), 1, "held once, at the step shown: {paused:?}");
    assert_eq!(paused[0]["global_step"].as_u64(), Some(held as u64));
}

#[test]
fn the_offer_after_a_loss_that_is_not_finite_says_the_batches_it_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // The loss is NaN from step 31 on, found at the report of step 40; points every 4 steps,
    // none taken of weights that are not finite: the newest is some steps before the pause.
    let flags = [
        "--devices",
        "cpu:2",
        "--epochs",
        "500",
        "--log-every",
        "10",
        "--snapshot-every",
        "4steps",
        "--on-nan",
        "pause",
    ];
    let mut tui = common::train_in_pty(&run, &flags, 100, 30, &[("DPT_INJECT_FAULT", "nan-loss=31")]);
    let skips = batches_the_dialog_skips(&tui.wait_for("batch(es)?", WAIT));
    tui.send("y");
    tui.wait_for("rewound from step", WAIT);
    // The loss is NaN again at step 31: offered again, declined, the run stopped while paused.
    tui.wait_for("batch(es)?", WAIT);
    tui.send("n");
    tui.send("q");
    tui.wait_for("Stop after the current step", WAIT);
    tui.send("y");
    tui.wait_exit(WAIT);
    let records = common::records(&run);
    let rewound = records.iter().find(|r| r["event"] == "rewound").expect("a rewound record");
    assert!(skips > 0, "{rewound}");
    assert_eq!(rewound["skipped"].as_u64(), Some(skips), "the offer said what the run skipped: {rewound}");
}

#[test]
fn ascii_and_monochrome_in_a_real_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut tui = common::train_in_pty(
        &run,
        &["--devices", "cpu", "--epochs", "500"],
        80,
        24,
        &[("LANG", "C"), ("NO_COLOR", "1")],
    );
    let screen = tui.wait_for("RUNNING", WAIT);
    assert!(screen.is_ascii(), "a non-UTF-8 locale gets ASCII:\n{screen}");
    assert_eq!(tui.colored_cells(), 0, "NO_COLOR: not one coloured cell:\n{screen}");
    tui.send("\x03");
    let status = tui.wait_exit(WAIT);
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_finished_job_is_reaped_while_its_dashboard_stays_open() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let flags = ["--devices", "cpu", "--epochs", "1", "--train-limit", "256", "--test-limit", "128"];
    let mut tui = common::train_in_pty(&run, &flags, 100, 30, &[]);
    tui.wait_for("FINISHED", WAIT);
    // The dashboard stays open on the summary; its job (the front's child) must be reaped, not
    // left a zombie until the dashboard closes.
    let children = || -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", tui.pid())).unwrap();
        let listed = tasks.filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("children")).ok());
        listed.flat_map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>()).collect()
    };
    common::until(WAIT, "end of the finished job", || {
        let left = children();
        let states: Vec<String> = left
            .iter()
            .map(|c| std::fs::read_to_string(format!("/proc/{c}/stat")).unwrap_or_default())
            .collect();
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!("it lingers: {states:?}")),
        }
    });
    tui.send("q");
    assert!(tui.wait_exit(WAIT).success());
}

#[test]
fn detach_with_d_and_attach_again() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut tui = common::train_in_pty(
        &run,
        &["--devices", "cpu:2", "--epochs", "500", "--log-every", "2"],
        100,
        30,
        &[],
    );
    tui.wait_for("train loss", WAIT);
    tui.send("+");
    tui.wait_for("lr 0.2 -> 0.4", WAIT);
    tui.send("d");
    assert!(tui.wait_exit(WAIT).success());
    assert!(tui.contents().contains("detached; training goes on"), "{}", tui.contents());

    let mut again = PtyRun::spawn(&["attach", run.to_str().unwrap()], 100, 30, &[]);
    let screen = again.wait_for("RUNNING", WAIT);
    assert!(screen.contains("lr 0.4"), "the change is still there:\n{screen}");
    again.wait_for("lr 0.2 -> 0.4", WAIT);
    again.send("q");
    again.wait_for("Stop after the current step", WAIT);
    again.send("y");
    assert!(again.wait_exit(WAIT).success());
    let records = common::wait_for_summary(&run, WAIT);
    assert_eq!(records.last().unwrap()["reason"], "stopped");
}

#[test]
fn show_draws_a_second_run_under_the_first_with_what_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<std::path::PathBuf> =
        ["0.1", "0.4"].iter().map(|lr| tmp.path().join(format!("lr{lr}"))).collect();
    for (run, lr) in runs.iter().zip(["0.1", "0.4"]) {
        let out = Dpt::new()
            .args(["--headless", "--devices", "cpu", "--epochs", "2", "--train-limit", "512", "--lr", lr])
            .args(["--data", common::subset_dir().to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
            .output();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut tui = common::pty::PtyRun::spawn(
        &["show", runs[0].to_str().unwrap(), runs[1].to_str().unwrap()],
        120,
        40,
        &[],
    );
    let screen = tui.wait_for("compare", WAIT);
    assert!(screen.contains("━ lr0.4"), "the legend names the baseline:\n{screen}");
    let row = screen.lines().find(|l| l.contains("│lr ")).unwrap_or_else(|| panic!("an lr row:\n{screen}"));
    assert!(row.contains("0.1") && row.contains("0.4"), "{row}");
    assert!(screen.contains("best test acc"), "{screen}");
    tui.send("q");
    assert!(tui.wait_exit(WAIT).success());
}

#[test]
fn the_status_panel_says_what_limits_the_step() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut tui = common::train_in_pty(
        &run,
        &["--devices", "cpu:2", "--epochs", "500", "--log-every", "2", "--sample-ms", "200"],
        120,
        40,
        &[("DPT_INJECT_FAULT", "slow-replica=1@40")],
    );
    let screen = tui.wait_for("bottleneck straggler: replica 1 (cpu) is ", WAIT);
    let line = screen.lines().find(|l| l.contains("bottleneck straggler")).unwrap();
    assert!(line.contains("slower than replica 0 (cpu)"), "{screen}");
    assert!(screen.contains("the other replicas wait for it"), "{screen}");
    tui.send("q");
    tui.wait_for("Stop after the current step and save the weights?", WAIT);
    tui.send("y");
    assert!(tui.wait_exit(WAIT).success());
}
