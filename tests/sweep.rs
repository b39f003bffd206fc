//! Sweeps end to end: bad sweeps refused before any trial starts; a 2 × 2 sweep (lr × seed) of
//! lenet with two trials at once, each trial ending with the weights of the same settings run
//! alone; the same command after the sweep was killed with SIGKILL continues its trials from
//! their checkpoints and ends equal; a failing trial is marked failed with its reason while the
//! others finish; SIGTERM stops a sweep, its trials checkpointed; `--prune median` and
//! `--prune asha` stop a trial that falls behind and start the next; `show SWEEP` prints the
//! table, the seeds' means and `--csv`; the sweep board in a real terminal opens a trial's
//! dashboard and comes back, stops a trial, sets another's lr and stops the sweep.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::{self, until, Dpt};

/// Cores per trial that make two trials run at once on this machine.
fn half_the_cores() -> usize {
    (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1)
}

/// The sweep's training flags: lenet on the shipped subset, 2 epochs, lr × seed.
fn sweep_flags(data: &Path, per: usize) -> Vec<String> {
    [
        "--data",
        data.to_str().unwrap(),
        "--epochs",
        "2",
        "--log-every",
        "2",
        "--sweep",
        "lr=0.3,0.9",
        "--sweep",
        "seed=1..2",
        "--trial-devices",
        &per.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

fn sweep(folder: &Path, flags: &[String]) -> Dpt {
    let mut c = Dpt::new();
    c.args(flags).run_dir(folder).scratch_runtime().env_remove("DPT_INJECT_FAULT");
    c
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn assert_same_weights(a: &Path, b: &Path) {
    let (x, y) = (common::weights(a), common::weights(b));
    assert_eq!(x.len(), y.len());
    for ((n, t), (m, u)) in x.iter().zip(&y) {
        assert_eq!(n, m);
        assert!(t.equal(u), "{n} differs between {} and {}", a.display(), b.display());
    }
}

/// A sweep whose runs are judged by their loss (`--best-metric val_loss`): its table, `ls` and
/// its "best" all mean the lowest loss, as its runs and its pruner judge them.
#[test]
fn a_sweep_judged_by_its_loss_ranks_its_trials_by_it_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("by-loss");
    let flags: Vec<String> = ["--data", data.to_str().unwrap(), "--epochs", "1", "--log-every", "2"]
        .into_iter()
        .chain(["--best-metric", "val_loss", "--sweep", "lr=0.02,0.3", "--trial-devices", "1"])
        .map(str::to_owned)
        .collect();
    let out = sweep(&folder, &flags).ok();
    assert!(out.contains("(best loss "), "{out}");
    let csv = Dpt::new().args(["show", folder.to_str().unwrap(), "--csv"]).ok();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        ["trial", "lr", "state", "epochs", "test acc", "best loss", "test loss", "train loss", "seconds"]
    );
    // One epoch: each trial's best is its test loss, and the sweep's best the lowest of them.
    for row in &rows[1..] {
        assert_eq!(row[5], row[6], "{csv}");
    }
    let loss = |row: &Vec<&str>| row[6].parse::<f64>().unwrap();
    let lowest = rows[1..].iter().min_by(|a, b| loss(a).total_cmp(&loss(b))).unwrap();
    let listed = Dpt::new().args(["ls", tmp.path().to_str().unwrap()]).ok();
    let line = listed.lines().find(|l| l.contains("by-loss")).expect("the sweep listed");
    assert!(line.contains(&format!("{} loss {}", lowest[0], lowest[6])), "{listed}");
}

#[test]
fn a_sweep_runs_each_trial_as_its_run_alone_and_its_command_again_finishes_a_killed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let per = half_the_cores();
    let flags = sweep_flags(&data, per);
    let whole = tmp.path().join("whole");
    let out = sweep(&whole, &flags).ok();
    assert!(out.contains("sweep: 4 trials (0 done before), 2 at once on cpu"), "{out}");
    assert_eq!(out.matches(" finished in ").count(), 4, "{out}");
    // The trials, in order: lr 0.3 seeds 1 and 2, then lr 0.9.
    let settings = [("0.3", "1"), ("0.3", "2"), ("0.9", "1"), ("0.9", "2")];
    for (i, (lr, seed)) in settings.iter().enumerate() {
        let alone = tmp.path().join(format!("alone-{i}"));
        let threads = per.to_string();
        Dpt::new()
            .headless()
            .data(&data)
            .run_dir(&alone)
            .args(["--epochs", "2", "--log-every", "2", "--lr", lr, "--seed", seed])
            .args(["--devices", "cpu", "--cpu-threads", &threads])
            .scratch_runtime()
            .env_remove("DPT_INJECT_FAULT")
            .ok();
        assert_same_weights(&whole.join(format!("trial-00{i}")), &alone);
    }

    // `show`: the table, the means over the seeds, CSV.
    let shown = Dpt::new().args(["show", whole.to_str().unwrap()]).ok();
    assert!(shown.lines().next().unwrap().starts_with("trial      lr   seed  state"), "{shown}");
    assert_eq!(shown.lines().filter(|l| l.contains("  finished  ")).count(), 4, "{shown}");
    assert!(shown.contains("  lr=0.3: test acc ") && shown.contains("(2 of 2 seeds)"), "{shown}");
    let csv = Dpt::new().args(["show", whole.to_str().unwrap(), "--csv"]).ok();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "trial,lr,seed,state,epochs,test acc,best acc,test loss,train loss,seconds");
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(rows[4].starts_with("trial-003,0.9,2,finished,2,"), "{csv}");

    // Every trial's curves in one picture, one colour and one legend entry per lr.
    let picture = tmp.path().join("sweep.svg");
    Dpt::new().args(["show", whole.to_str().unwrap(), "--svg", picture.to_str().unwrap()]).ok();
    let svg = std::fs::read_to_string(&picture).unwrap();
    assert_eq!((svg.matches("\nlr=0.3\n").count(), svg.matches("\nlr=0.9\n").count()), (2, 2), "{svg}");
    assert!(svg.contains("whole — 4 trials, by lr"));
    let png = tmp.path().join("sweep.png");
    Dpt::new().args(["show", whole.to_str().unwrap(), "--png", png.to_str().unwrap()]).ok();
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));

    // TensorBoard's HParams plugin: the experiment (the swept settings, typed as the runs
    // recorded them, and the metric tags) and each trial's end, read by TensorBoard's reader.
    let read = |dir: &Path| -> serde_json::Value {
        let out = common::run_script("tensorboard_read.py", &[dir.join("tensorboard")]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let tb = read(&whole);
    let experiment = &tb["experiment"];
    assert_eq!(experiment["hparams"]["optimizer.lr"]["type"], "DATA_TYPE_FLOAT64", "{tb}");
    assert_eq!(experiment["hparams"]["optimizer.lr"]["values"], serde_json::json!([0.3, 0.9]));
    assert_eq!(experiment["hparams"]["recipe.seed"]["values"], serde_json::json!([1.0, 2.0]));
    assert_eq!(experiment["metrics"], serde_json::json!(["test/accuracy", "test/loss", "train/epoch_loss"]));
    let trial = read(&whole.join("trial-002"));
    assert_eq!(trial["status"], "STATUS_SUCCESS", "{trial}");
    assert_eq!(trial["hparams"]["optimizer.lr"], 0.9, "the run's own session start");
    assert!(trial["scalars"]["test/accuracy"].as_array().is_some_and(|a| a.len() == 2), "{trial}");
    // The plugin's own backend lists the four trials with their lr, seed, final accuracy and end.
    let out = common::run_script("hparams_sessions.py", &[&whole]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["hparams"], serde_json::json!(["optimizer.lr", "recipe.seed"]), "{listed}");
    let groups = listed["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4, "{listed}");
    let g = groups.iter().find(|g| g["name"] == "trial-002/tensorboard").unwrap();
    assert_eq!(g["hparams"], serde_json::json!({"optimizer.lr": 0.9, "recipe.seed": 1.0}));
    assert_eq!(g["statuses"], serde_json::json!(["STATUS_SUCCESS"]));
    let shown_acc = Dpt::new().args(["show", whole.to_str().unwrap(), "--csv"]).ok();
    let row = shown_acc.lines().find(|l| l.starts_with("trial-002,")).unwrap();
    let acc: f64 = row.split(',').nth(5).unwrap().parse().unwrap();
    assert!((g["metrics"]["test/accuracy"].as_f64().unwrap() - acc).abs() < 1e-4, "{g} against {row}");

    // Killed with SIGKILL while its first trials train: its trials get SIGTERM, checkpoint
    // and stop; the same command continues them and starts the rest.
    let killed = tmp.path().join("killed");
    let mut first = sweep(&killed, &flags).stdout(Stdio::null()).spawn();
    let metrics = killed.join("trial-000").join("metrics.jsonl");
    until(Duration::from_secs(120), "trial-000's first step record", || {
        std::fs::read_to_string(&metrics).is_ok_and(|t| t.contains(r#""kind":"step""#))
    });
    common::kill(first.id(), "KILL");
    first.wait().unwrap();
    let again = sweep(&killed, &flags).ok();
    assert!(again.contains("trial-000 (1/4) continues on cpu"), "{again}");
    assert_eq!(again.matches(" finished in ").count(), 4, "{again}");
    for i in 0..4 {
        let dir = format!("trial-00{i}");
        assert_same_weights(&killed.join(&dir), &whole.join(&dir));
    }
    // `ls` lists both sweeps with their trials' states.
    let listed = Dpt::new().args(["ls", tmp.path().to_str().unwrap()]).ok();
    for folder in [&whole, &killed] {
        let line = listed.lines().find(|l| l.ends_with(folder.to_str().unwrap())).unwrap_or_default();
        assert!(line.starts_with("done       4 finished of 4"), "{listed}");
    }
    // Run once more, it has nothing left to do.
    let done = sweep(&killed, &flags).ok();
    assert!(done.contains("sweep: 4 trials (4 done before)"), "{done}");
    assert!(!done.contains(" started on ") && !done.contains(" continues on "), "{done}");
}

#[test]
fn a_failing_trial_is_marked_failed_with_its_reason_and_the_others_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let missing = tmp.path().join("no-such-data");
    let folder = tmp.path().join("sweep");
    let values = format!("data={},{}", data.display(), missing.display());
    let out = sweep(&folder, &["--epochs".into(), "1".into(), "--sweep".into(), values]).output();
    let text = text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("trial-000 (1/2) finished in "), "{text}");
    assert!(text.contains("trial-001 (2/2) failed: "), "{text}");
    assert!(text.contains("dpt-tui: 1 failed and 0 interrupted of 2 trials"), "{text}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(state["trials"][0]["state"], "finished");
    assert_eq!(state["trials"][1]["state"], "failed");
    let reason = state["trials"][1]["reason"].as_str().unwrap();
    assert!(reason.contains("no-such-data"), "{reason}");
    let shown = Dpt::new().args(["show", folder.to_str().unwrap()]).ok();
    assert!(shown.contains(&format!("trial-001 failed: {reason}")), "{shown}");
    // Without a terminal, `attach` names what to open instead of the sweep board.
    let out = Dpt::new().args(["attach", folder.to_str().unwrap()]).scratch_runtime().output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the sweep board needs a terminal; 'dpt-tui show "), "{err}");
}

#[test]
fn bad_sweeps_are_refused_in_one_line_before_any_trial_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let cases: [(&[&str], &str); 10] = [
        (&["--sweep", "optimizer.lrr=0.1"], "`optimizer.lrr` is no setting"),
        (&["--sweep", "lr=abc"], "trial trial-000 (lr=abc): invalid value 'abc' for '--lr <LR>'"),
        (&["--sweep", "lr=-0.1,0.1"], "trial trial-000 (lr=-0.1): --lr must be a positive finite number"),
        (&["--sweep", "seed=5..1"], "the range 5..1 is empty"),
        (&["--sweep", "seed=1..300"], "the sweep makes 300 trials, more than --max-trials 256"),
        (
            &["--sweep", "seed=1..3", "--max-trials", "2"],
            "the sweep makes 3 trials, more than --max-trials 2",
        ),
        (&["--sweep", "devices=cpu,cpu:2"], "placement.devices cannot be swept"),
        (&["--devices", "cpu", "--sweep", "lr=0.1"], "--devices does not apply to a sweep"),
        (&["--sweep", "lr=0.1", "--sweep", "optimizer.lr=0.2"], "optimizer.lr is swept twice"),
        (&["--sweep", "lr=0.1", "--on-nan", "pause"], "--on-nan pause would hold the trial forever"),
    ];
    for (i, (flags, said)) in cases.iter().enumerate() {
        let folder = tmp.path().join(format!("s{i}"));
        let out = Dpt::new()
            .data(&data)
            .args(["--epochs", "1"])
            .args(*flags)
            .run_dir(&folder)
            .scratch_runtime()
            .output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: one line: {err}");
        assert!(err.starts_with("dpt-tui: ") && err.contains(said), "{flags:?}: {err}");
        assert!(!folder.exists(), "{flags:?}: nothing written");
    }
    // A --config file that holds `sweep` would make every trial a sweep.
    let config = tmp.path().join("sweep.toml");
    std::fs::write(&config, "sweep = [\"seed=1..2\"]\n").unwrap();
    let folder = tmp.path().join("from-config");
    let out = Dpt::new()
        .data(&data)
        .args(["--config", config.to_str().unwrap()])
        .run_dir(&folder)
        .scratch_runtime()
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("its --config file holds `sweep` or `detach`"), "{err}");
    assert!(!folder.exists());
    // A folder that holds another sweep is not taken over.
    let folder = tmp.path().join("other");
    let first = ["--epochs", "1", "--train-limit", "200", "--sweep", "seed=1"];
    Dpt::new().data(&data).args(first).run_dir(&folder).scratch_runtime().ok();
    let out = Dpt::new()
        .data(&data)
        .args(["--epochs", "1", "--train-limit", "200", "--sweep", "seed=2"])
        .run_dir(&folder)
        .scratch_runtime()
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("holds another sweep"), "{err}");
}

#[test]
fn sigterm_stops_a_sweep_its_trials_checkpointed_and_none_started_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let per = half_the_cores().to_string();
    let flags: Vec<String> =
        ["--epochs", "3", "--log-every", "2", "--sweep", "lr=0.1,0.2,0.3", "--trial-devices", &per]
            .map(str::to_owned)
            .to_vec();
    let mut c = sweep(&folder, &flags);
    c.data(&data).piped();
    let child = c.spawn();
    let metrics = folder.join("trial-000").join("metrics.jsonl");
    until(Duration::from_secs(120), "trial-000's first step record", || {
        std::fs::read_to_string(&metrics).is_ok_and(|t| t.contains(r#""kind":"step""#))
    });
    // The same sweep started again meanwhile is refused: one sweep process per folder.
    let mut again = sweep(&folder, &flags);
    let second = again.data(&data).output();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains("is being run by another sweep process (pid "), "{err}");
    common::kill(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(143), "{said}");
    assert!(said.contains("sweep: SIGTERM: the running trials checkpoint and stop"), "{said}");
    assert!(said.contains("trial-000 (1/3) was interrupted (with status 143)"), "{said}");
    assert!(!said.contains("trial-002 (3/3) started"), "no trial starts after the signal: {said}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(state["trials"][0]["state"], "interrupted");
    assert_eq!(state["trials"][2]["state"], "pending");
    assert!(folder.join("trial-000").join("checkpoint.safetensors").is_file());
}

/// All the cores for one trial: the trials run one after another, so that which have finished
/// when another is judged does not depend on timing.
fn all_the_cores() -> String {
    std::thread::available_parallelism().map_or(1, |n| n.get()).to_string()
}

fn state_of(folder: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(folder.join("sweep.json")).unwrap()).unwrap()
}

#[test]
fn median_pruning_stops_a_trial_below_the_finished_trials_median_and_the_next_one_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let cores = all_the_cores();
    // Five trials that learn, then one whose lr is far too small, then one more.
    let flags = [
        "--model",
        "mnist-net",
        "--epochs",
        "4",
        "--sweep",
        "lr=0.05,0.04,0.06,0.03,0.07,0.0001,0.05001",
        "--trial-devices",
        &cores,
        "--prune",
        "median",
    ];
    let mut c = sweep(&folder, &flags.map(str::to_owned));
    let out = c.data(&data).ok();
    let state = state_of(&folder);
    for i in 0..5 {
        assert_eq!(state["trials"][i]["state"], "finished", "{out}");
    }
    assert_eq!(state["trials"][5]["state"], "pruned", "{out}");
    let why = state["trials"][5]["reason"].as_str().unwrap();
    assert!(why.contains("its best val_acc") && why.contains("is worse than the median"), "{why}");
    assert!(why.ends_with("of 5 finished trials"), "{why}");
    assert!(out.contains("trial-005 (6/7) pruned: at epoch "), "{out}");
    assert!(out.contains("trial-006 (7/7) started on "), "the next trial takes its place: {out}");
    let records = common::records(&folder.join("trial-005"));
    let epochs = records.iter().filter(|r| r["kind"] == "epoch").count();
    assert!(epochs < 4, "stopped before its last epoch: {epochs}");
}

#[test]
fn asha_stops_a_trial_outside_the_best_quarter_at_its_rung_and_it_stays_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let cores = all_the_cores();
    let flags = [
        "--model",
        "mnist-net",
        "--epochs",
        "4",
        "--sweep",
        "lr=0.05,0.0001",
        "--trial-devices",
        &cores,
        "--prune",
        "asha",
    ]
    .map(str::to_owned);
    let out = sweep(&folder, &flags).data(&data).ok();
    let state = state_of(&folder);
    assert_eq!(state["trials"][0]["state"], "finished", "{out}");
    assert_eq!(state["trials"][0]["rungs"].as_array().unwrap().len(), 2, "epochs 1 and 4 are rungs: {state}");
    assert_eq!(state["trials"][1]["state"], "pruned", "{out}");
    let why = state["trials"][1]["reason"].as_str().unwrap();
    assert!(
        why.contains("at rung 0 (epoch 1) its val_acc") && why.contains("not among the best 1 of the 2"),
        "{why}"
    );
    // The same command again: a stopped trial is not run again.
    let again = sweep(&folder, &flags).data(&data).ok();
    assert!(again.contains("sweep: 2 trials (2 done before)"), "{again}");
    assert!(!again.contains(" started on ") && !again.contains(" continues on "), "{again}");
}

#[test]
fn a_detached_sweep_runs_in_the_background_its_lines_in_sweep_log() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    // No --run-dir: the default folder is named once, by the command, and the background
    // process runs that one.
    let flags = ["--epochs", "1", "--train-limit", "500", "--sweep", "seed=1..2", "--detach"];
    let said = Dpt::new().dir(tmp.path()).data(&data).args(flags).scratch_runtime().ok();
    assert!(said.contains("sweep: 2 trials started in the background (pid "), "{said}");
    let folders: Vec<_> =
        std::fs::read_dir(tmp.path().join("runs")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    let folder = folders[0].clone();
    let name = folder.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.ends_with("-sweep-lenet"), "{name}");
    assert!(said.contains(&format!("follow it:  tail -f runs/{name}/sweep.log")), "{said}");
    let done = || {
        let state = state_of(&folder);
        let finished = state["trials"].as_array().unwrap().iter().all(|t| t["state"] == "finished");
        finished && state.get("pid").is_none()
    };
    until(Duration::from_secs(180), "the detached sweep's end", done);
    assert_eq!(std::fs::read_dir(tmp.path().join("runs")).unwrap().count(), 1, "no second folder");
    let log = std::fs::read_to_string(folder.join("sweep.log")).unwrap();
    assert!(log.contains("trial-001 (2/2) finished in "), "{log}");
    assert!(log.lines().any(|l| l.starts_with("trial-000  1     finished")), "the table: {log}");
}

/// Stops the sweep whose folder it names when dropped (a test that failed, or left it running
/// in the background), and waits for it to end before the folder goes.
struct StopSweep<'a>(&'a Path);

impl Drop for StopSweep<'_> {
    fn drop(&mut self) {
        let state = std::fs::read_to_string(self.0.join("sweep.json")).unwrap_or_default();
        let pid = serde_json::from_str::<serde_json::Value>(&state).ok().and_then(|s| s["pid"].as_u64());
        if let Some(pid) = pid {
            let _ = dpt_tui::sys::terminate_process(pid as u32);
            let proc = format!("/proc/{pid}");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while Path::new(&proc).exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The row of `trial` on the board's screen.
fn row<'a>(screen: &'a str, trial: &str) -> &'a str {
    screen.lines().find(|l| l.contains(&format!("{trial} "))).unwrap_or("")
}

/// The sweep board in a real terminal: a sweep started with one opens it; Enter opens a running
/// trial's own dashboard and Esc comes back; `x` stops that trial (recorded as stopped, its place
/// going to the next trial), `l` sets another's lr, `X` stops the sweep, `q` closes the board.
#[test]
fn the_sweep_board_opens_stops_and_steers_trials_in_a_real_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let _stop = StopSweep(&folder);
    let per = half_the_cores().to_string();
    let args = [
        "--data",
        data.to_str().unwrap(),
        "--epochs",
        "500",
        "--sweep",
        "lr=0.9,1.5,2.0",
        "--trial-devices",
        &per,
        "--run-dir",
        folder.to_str().unwrap(),
    ];
    let wait = Duration::from_secs(90);
    let mut tui = common::pty::PtyRun::spawn(&args, 130, 36, &[]);
    let running =
        |s: &str| row(s, "trial-000").contains("running") && row(s, "trial-001").contains("running");
    tui.wait_until("the board with two trials running", running, wait);
    // trial-000, selected first: its own dashboard, then back.
    tui.send("\r");
    let opened = |s: &str| s.contains("RUNNING") && s.contains("back to the sweep");
    let screen = tui.wait_until("trial-000's dashboard", opened, wait);
    assert!(screen.contains("lenet on [cpu]"), "{screen}");
    tui.send("\x1b");
    tui.wait_for("trials · test acc", wait);
    tui.send("x");
    tui.wait_for("Stop trial-000?", wait);
    tui.send("y");
    let next = |s: &str| row(s, "trial-000").contains("stopped") && row(s, "trial-002").contains("running");
    tui.wait_until("trial-000 stopped and the next trial started", next, wait);
    tui.send("j");
    tui.send("l");
    tui.wait_for("trial-001's new lr", wait);
    tui.send("0.5\r");
    tui.wait_for("trial-001: lr 0.5 from its next step", wait);
    tui.send("X");
    tui.wait_for("Stop the sweep?", wait);
    tui.send("y");
    tui.wait_for("· stopped ·", wait);
    tui.send("q");
    let status = tui.wait_exit(wait);
    assert!(status.success(), "{status:?}\n{}", tui.contents());

    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("sweep.json")).unwrap()).unwrap();
    let states: Vec<&str> = (0..3).map(|i| state["trials"][i]["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["stopped", "interrupted", "interrupted"], "{state}");
    assert_eq!(state["trials"][0]["reason"], "stopped by its user");
    let records = std::fs::read_to_string(folder.join("trial-001/metrics.jsonl")).unwrap();
    assert!(records.contains(r#""event":"lr_changed","from":1.5,"to":0.5"#), "{records}");
    // `show` gives the stopped trial's reason.
    let shown = Dpt::new().args(["show", folder.to_str().unwrap()]).ok();
    assert!(shown.contains("trial-000 stopped: stopped by its user"), "{shown}");
}

/// An upgrade during a sweep: its executable's file replaced while its first trial runs, the
/// next trial still starts, from the sweep's own version.
#[test]
fn trials_start_after_the_sweeps_executable_file_was_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let exe = tmp.path().join("dpt-tui");
    std::fs::copy(common::BIN, &exe).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).to_string();
    let flags = ["--epochs", "2", "--train-limit", "1000", "--sweep", "seed=1,2", "--trial-devices", &cores];
    let child = std::process::Command::new(&exe)
        .args(["--headless", "--data", data.to_str().unwrap(), "--run-dir", folder.to_str().unwrap()])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until(Duration::from_secs(60), "start of trial-000", || folder.join("trial-000.log").exists());
    assert!(!folder.join("trial-001.log").exists(), "trial-001 starts after the file is replaced");
    std::fs::remove_file(&exe).unwrap();
    std::fs::write(&exe, "#!/bin/sh\nexit 3\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("trial-001 (2/2) finished in "), "{text}");
}

/// `dpt-tui show SWEEP --csv | head -1` on a table longer than a pipe holds: the command ends
/// quietly when the reader closes the pipe, as `ls` or `cat` would, without a panic.
#[test]
fn a_table_printed_into_a_closed_pipe_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("sweep");
    std::fs::create_dir_all(&folder).unwrap();
    let trials: Vec<serde_json::Value> = (0..4000)
        .map(|i| serde_json::json!({"values": [i.to_string()], "dir": format!("trial-{i:04}"), "state": "pending"}))
        .collect();
    let values: Vec<String> = (0..4000).map(|i| i.to_string()).collect();
    let state = serde_json::json!({"command": [], "axes": [{"key": "recipe.seed", "values": values}], "trials": trials});
    std::fs::write(folder.join("sweep.json"), state.to_string()).unwrap();
    let mut child = std::process::Command::new(common::BIN)
        .args(["show", folder.to_str().unwrap(), "--csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 5];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    assert_eq!(&first, b"trial");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(libc::SIGPIPE), "{err}");
}

/// The terminal of a sweep's board goes away (a dropped SSH connection): the board's process
/// leaves at once, and the sweep goes on in the background.
#[test]
fn a_boards_terminal_that_goes_away_ends_the_board_and_the_sweep_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let folder = tmp.path().join("sweep");
    let _stop = StopSweep(&folder);
    let args = ["--data", data.to_str().unwrap(), "--epochs", "500", "--sweep", "lr=0.9,1.5"];
    let mut tui = common::pty::PtyRun::spawn(
        &[&args[..], &["--run-dir", folder.to_str().unwrap()]].concat(),
        120,
        30,
        &[],
    );
    let wait = Duration::from_secs(90);
    tui.wait_until("a running trial on the board", |s| row(s, "trial-000").contains("running"), wait);
    tui.hang_up();
    // Not a hang in the terminal's reader (crossterm keeps reading the end of the file).
    tui.wait_exit(Duration::from_secs(30));
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("sweep.json")).unwrap()).unwrap();
    let pid = state["pid"].as_u64().expect("the sweep process runs") as u32;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the sweep goes on");
}
