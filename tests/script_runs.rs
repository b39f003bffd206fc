//! `dpt-tui run -- CMD`: a user's own PyTorch script (tests/scripts/client/) watched and steered
//! through the attach socket, as the dashboard does: a plain loop and two ranks under torchrun
//! over Gloo, each control proven by what the script did (the lr its optimizer used, the step
//! at which every rank stopped, the file it saved); then bad input.

use crate::common::steering::{last_step, paused_at, step_past, steps, stop_at, WAIT};
use crate::common::{self, until, until_record, Dpt};

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use dpt_tui::engine::{Control, Record};
use dpt_tui::record::{Change, FinishReason};
use dpt_tui::remote::client::{self, Attached};

/// The client package, as `pip install ./python` would put it on the path.
fn client_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python")
}

fn client_script(name: &str) -> PathBuf {
    common::script("client").join(name)
}

/// `dpt-tui run --headless --run-dir RUN -- python SCRIPT ARGS` with its registry of its own;
/// the script's process group is stopped when dropped.
struct ScriptRun {
    child: Child,
    run: PathBuf,
    tmp: tempfile::TempDir,
}

impl ScriptRun {
    fn start(command: &[&std::ffi::OsStr]) -> ScriptRun {
        ScriptRun::start_with(&[], command)
    }

    /// With `flags` of `run` before the `--`.
    fn start_with(flags: &[&str], command: &[&std::ffi::OsStr]) -> ScriptRun {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let xdg = tmp.path().join("xdg");
        std::fs::create_dir_all(&xdg).unwrap();
        let child = Dpt::new()
            .args(["run", "--headless", "--run-dir"])
            .arg(&run)
            .args(flags)
            .arg("--")
            .args(command)
            .env("XDG_RUNTIME_DIR", &xdg)
            .env("PYTHONPATH", client_path())
            .stdout(Stdio::from(std::fs::File::create(tmp.path().join("stdout")).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(tmp.path().join("stderr")).unwrap()))
            .spawn();
        ScriptRun { child, run, tmp }
    }

    fn python(script: &str, args: &[&Path]) -> ScriptRun {
        let python = common::python();
        let path = client_script(script);
        let mut command: Vec<&std::ffi::OsStr> = vec![python.as_ref(), path.as_os_str()];
        command.extend(args.iter().map(|a| a.as_os_str()));
        ScriptRun::start(&command)
    }

    /// The dashboard's connection, once the run serves.
    fn attach(&mut self) -> Attached {
        let run = self.run.clone();
        let child = &mut self.child;
        until(WAIT, "served run", || client::is_live(&run) || child.try_wait().unwrap().is_some());
        client::attach(&self.run, false).unwrap_or_else(|e| panic!("{e}: {}", self.output()))
    }

    fn output(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.tmp.path().join(f)).unwrap_or_default();
        format!("stdout:\n{}\nstderr:\n{}", read("stdout"), read("stderr"))
    }

    /// dpt-tui's exit status, once it has ended.
    fn wait(&mut self) -> i32 {
        let status = until(WAIT, "end of the run", || self.child.try_wait().unwrap());
        status.code().unwrap_or(-1)
    }
}

impl Drop for ScriptRun {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // dpt-tui passes the signal on to the script's process group.
            common::kill(self.child.id(), "TERM");
            let _ = common::within(Duration::from_secs(20), || self.child.try_wait().ok().flatten());
            let _ = self.child.kill();
        }
    }
}

#[test]
fn a_plain_loop_is_paused_given_a_new_lr_saved_and_stopped_from_the_dashboards_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("steps.jsonl");
    let mut job = ScriptRun::python("plain_loop.py", &[&out]);
    let Attached { records, controls, monitor: _monitor, .. } = job.attach();
    step_past(&records, 3);
    controls.send(Control::Pause).unwrap();
    let p = paused_at(&records);
    until(WAIT, "the script waiting at its pause", || last_step(&out) == Some(p));
    // A pause is a wait, not a slower loop: nothing moves while it lasts.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(last_step(&out), Some(p), "{}", job.output());
    controls.send(Control::SetLr { lr: 0.05 }).unwrap();
    let (lr, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::LrChanged { .. })));
    assert_eq!(lr, Record::Event(Change::LrChanged { from: 0.1, to: 0.05, global_step: p }));
    controls.send(Control::Resume).unwrap();
    until_record(&records, WAIT, |r| *r == Record::Event(Change::Resumed { global_step: p }));
    let Record::Step(s) = step_past(&records, p + 2) else { unreachable!() };
    assert!((s.lr - 0.05).abs() < 1e-12, "the step record says the lr the steps used: {}", s.lr);
    controls.send(Control::SaveNow).unwrap();
    let (saved, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Saved { .. })));
    let Record::Event(Change::Saved { path, .. }) = saved else { unreachable!() };
    assert_eq!(Path::new(&path), job.run.join("weights.pt"));
    assert!(Path::new(&path).is_file());
    controls.send(Control::Rewind { global_step: 1, lr: None, skip: false }).unwrap();
    let (refused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Refused { .. })));
    assert!(format!("{refused:?}").contains("rewind"), "{refused:?}");
    controls.send(Control::Stop).unwrap();
    let s = stop_at(&records);
    let (summary, _) = until_record(&records, WAIT, |r| matches!(r, Record::Summary(_)));
    let Record::Summary(summary) = summary else { unreachable!() };
    assert_eq!((summary.reason, summary.global_steps), (FinishReason::Stopped, s));
    assert_eq!(job.wait(), 0, "{}", job.output());

    // What the script did: the old lr up to the pause, the new one after it (its own
    // schedule still set the lr every step), and its last step the one the stop was asked at.
    let (done, stopped) = steps(&out);
    assert_eq!(stopped, Some(s));
    assert_eq!(done.len(), s);
    for (step, lr) in done {
        let want = if step <= p { 0.1 } else { 0.05 };
        assert!((lr - want).abs() < 1e-12, "step {step} used lr {lr}, not {want}");
    }
    // The record: the script's own label, its scalars, its evaluations.
    let recorded = common::records(&job.run);
    assert_eq!(recorded[0]["kind"], "start");
    assert_eq!(recorded[0]["script"]["label"], "mlp");
    assert_eq!(recorded[0]["script"]["config"]["hidden"], 64);
    assert!(recorded.iter().any(|r| r["kind"] == "step" && r["scalars"]["sq"].is_number()));
    assert!(recorded.iter().any(|r| r["kind"] == "eval" && r["metrics"]["val_loss"].is_number()));
    let log = std::fs::read_to_string(job.run.join("output.log")).unwrap();
    assert!(log.is_empty() || !log.contains("Traceback"), "{log}");
}

#[test]
fn two_ranks_under_torchrun_pause_change_lr_and_stop_at_the_same_step() {
    let tmp = tempfile::tempdir().unwrap();
    let python = common::python();
    let script = client_script("ddp.py");
    let mut job = ScriptRun::start(&[
        python.as_ref(),
        "-m".as_ref(),
        "torch.distributed.run".as_ref(),
        "--standalone".as_ref(),
        "--nproc-per-node".as_ref(),
        "2".as_ref(),
        script.as_os_str(),
        tmp.path().as_os_str(),
    ]);
    let rank = |r: usize| tmp.path().join(format!("rank-{r}.jsonl"));
    let Attached { records, controls, monitor: _monitor, .. } = job.attach();
    let Record::Step(first) = step_past(&records, 2) else { unreachable!() };
    assert_eq!(first.replicas.len(), 2, "each rank's step time");
    assert!(first.replicas.iter().all(|r| r.compute > 0.0), "{:?}", first.replicas);
    controls.send(Control::Pause).unwrap();
    let p = paused_at(&records);
    until(WAIT, "both ranks at the pause", || {
        last_step(&rank(0)) == Some(p) && last_step(&rank(1)) == Some(p)
    });
    controls.send(Control::SetLr { lr: 0.1 }).unwrap();
    controls.send(Control::Resume).unwrap();
    step_past(&records, p + 3);
    controls.send(Control::Stop).unwrap();
    let s = stop_at(&records);
    until_record(&records, WAIT, |r| matches!(r, Record::Summary(_)));
    assert_eq!(job.wait(), 0, "{}", job.output());
    for r in 0..2 {
        let (done, stopped) = steps(&rank(r));
        assert_eq!(stopped, Some(s), "rank {r}");
        for (step, lr) in done {
            let want = if step <= p { 0.2 } else { 0.1 };
            assert!((lr - want).abs() < 1e-12, "rank {r} step {step} used lr {lr}, not {want}");
        }
    }
}

#[test]
fn a_script_that_raises_is_recorded_failed_with_its_line_and_keeps_its_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let alerts = tmp.path().join("alerts");
    let notify = format!("echo \"$DPT_EVENT $DPT_MESSAGE\" >> {}", alerts.display());
    let python = common::python();
    let script = client_script("fails.py");
    let mut job = ScriptRun::start_with(&["--notify", &notify], &[python.as_ref(), script.as_os_str()]);
    assert_eq!(job.wait(), 1, "{}", job.output());
    // --notify: the failure reached the alert command, with its message.
    let said = std::fs::read_to_string(&alerts).unwrap_or_default();
    assert!(said.starts_with("failed ValueError: the batch had no rows"), "{said:?}");
    let recorded = common::records(&job.run);
    let failed = recorded.iter().find(|r| r["event"] == "failed").unwrap_or_else(|| panic!("{recorded:?}"));
    let message = failed["message"].as_str().unwrap();
    assert!(message.starts_with("ValueError: the batch had no rows (fails.py:"), "{message}");
    assert!(!recorded.iter().any(|r| r["kind"] == "summary"));
    assert!(std::fs::read_to_string(job.run.join("output.log")).unwrap().contains("Traceback"));
}

#[test]
fn bad_commands_say_what_was_wrong_in_one_line_and_leave_no_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let run = |dir: &str, command: &[&str]| {
        let out = Dpt::new()
            .args(["run", "--headless", "--run-dir"])
            .arg(tmp.path().join(dir))
            .args(command)
            .env("XDG_RUNTIME_DIR", &xdg)
            .env("PYTHONPATH", client_path())
            .output();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run("none", &[]);
    assert_eq!(code, Some(2));
    assert!(err.trim().lines().count() == 1 && err.contains("after --"), "{err}");
    let (code, err) = run("missing", &["--", "/no/such/program"]);
    assert_eq!(code, Some(2));
    assert!(err.trim().lines().count() == 1 && err.contains("cannot start /no/such/program"), "{err}");
    let python = common::python();
    let (code, err) = run("quick", &["--", &python, "-c", "import sys; sys.exit(3)"]);
    assert_eq!(code, Some(3), "the script's own status");
    assert!(err.contains("exited (exit status 3) before calling dpt_tui.init"), "{err}");
    for dir in ["none", "missing", "quick"] {
        assert!(!tmp.path().join(dir).exists(), "{dir} left behind");
    }
}

/// A framework's run (`script OUT DIR`) steered from the socket: the lr halved, a save, a stop;
/// the script's own lines prove each (its optimizer's lr, the framework's last step, the file).
fn steer_a_framework(script: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("steps.jsonl");
    let mut job = ScriptRun::python(script, &[&out, tmp.path()]);
    let Attached { records, controls, monitor: _monitor, .. } = job.attach();
    step_past(&records, 3);
    controls.send(Control::SetLr { lr: 0.05 }).unwrap();
    let (lr, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::LrChanged { .. })));
    let Record::Event(Change::LrChanged { from, to, global_step: c }) = lr else { unreachable!() };
    assert_eq!((from, to), (0.1, 0.05));
    step_past(&records, c + 3);
    controls.send(Control::SaveNow).unwrap();
    let (saved, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Saved { .. })));
    let Record::Event(Change::Saved { path, .. }) = saved else { unreachable!() };
    assert!(Path::new(&path).exists(), "{path} not written");
    controls.send(Control::Stop).unwrap();
    let s = stop_at(&records);
    until_record(&records, WAIT, |r| matches!(r, Record::Summary(_)));
    assert_eq!(job.wait(), 0, "{}", job.output());
    let (done, stopped) = steps(&out);
    assert_eq!(stopped, Some(s), "the framework stopped at the step the stop was asked at");
    assert!(done.len() >= s, "{} steps written of {s}", done.len());
    for (step, lr) in done {
        let want = if step <= c { 0.1 } else { 0.05 };
        assert!((lr - want).abs() < 1e-12, "step {step} used lr {lr}, not {want}");
    }
}

#[test]
fn a_lightning_fit_is_given_a_new_lr_saved_and_stopped_through_its_callback() {
    steer_a_framework("lightning_fit.py");
}

#[test]
fn a_hugging_face_trainer_is_given_a_new_lr_saved_and_stopped_through_its_callback() {
    steer_a_framework("hf_train.py");
}

#[test]
fn the_seeds_animator_loop_shows_its_curves_by_changing_one_import() {
    let mut job = ScriptRun::python("animator.py", &[]);
    assert_eq!(job.wait(), 0, "{}", job.output());
    let log = std::fs::read_to_string(job.run.join("output.log")).unwrap();
    let kept: serde_json::Value =
        serde_json::from_str(log.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{log}")))
            .unwrap();
    let recorded = common::records(&job.run);
    assert_eq!(recorded[0]["script"]["framework"], "animator");
    assert_eq!(recorded[0]["task"], "classify", "its train acc makes it a classifier");
    // Every evaluation the Animator kept is in the record, as the dashboard's test curve.
    let evals: Vec<f64> = recorded
        .iter()
        .filter(|r| r["kind"] == "eval")
        .map(|r| r["metrics"]["test acc"].as_f64().unwrap())
        .collect();
    let kept_acc: Vec<f64> =
        kept["test_acc"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(evals, kept_acc);
    assert_eq!(kept["points"], 24, "d2l keeps an x per value given: 3 x 8 train losses");
    assert_eq!(evals.len(), 3);
    let last_loss = recorded.iter().rev().find(|r| r["kind"] == "step").unwrap();
    assert_eq!(last_loss["global_step"], 24);
    let summary = recorded.last().unwrap();
    assert_eq!((summary["kind"].as_str(), summary["reason"].as_str()), (Some("summary"), Some("completed")));
}

#[test]
fn a_script_started_without_dpt_tui_run_starts_its_backend_and_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let out = std::process::Command::new(common::python())
        .arg(client_script("counted.py"))
        .env("PYTHONPATH", client_path())
        .env("DPT_TUI_BIN", common::BIN)
        .env("DPT_TUI_RUN_DIR", &run)
        .env("XDG_RUNTIME_DIR", &xdg)
        .env_remove("DPT_TUI_ENDPOINT")
        .output()
        .unwrap();
    let text = common::ok(&out);
    assert!(text.contains("trained"), "{text}");
    // The backend ends when the script's connection closes, after writing the summary.
    let recorded = common::wait_for_summary(&run, WAIT);
    assert_eq!(recorded[0]["script"]["label"], "counted");
    assert!(recorded.iter().any(|r| r["kind"] == "eval"));
    let summary = recorded.last().unwrap();
    assert_eq!((summary["reason"].as_str(), summary["global_steps"].as_u64()), (Some("completed"), Some(20)));
    until(WAIT, "the backend gone", || !run.join("server.json").exists());
}

#[test]
fn in_a_terminal_the_dashboard_opens_on_the_script_and_pauses_and_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, out, xdg) = (tmp.path().join("run"), tmp.path().join("steps.jsonl"), tmp.path().join("xdg"));
    std::fs::create_dir_all(&xdg).unwrap();
    let python = common::python();
    let script = client_script("plain_loop.py");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let args = ["run", "--run-dir", &path(&run), "--", &python, &path(&script), &path(&out)];
    let env = [("PYTHONPATH", path(&client_path())), ("XDG_RUNTIME_DIR", path(&xdg))];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut pty = common::pty::PtyRun::spawn(&args, 120, 40, &env);
    let screen = pty.wait_for("RUNNING", WAIT);
    assert!(screen.contains("mlp on [cpu]"), "{screen}");
    // The script takes every control but a rewind: its key is not offered.
    assert!(screen.contains("set lr") && !screen.contains("rewind"), "{screen}");
    pty.send(" ");
    pty.wait_for("PAUSED", WAIT);
    let p = until(WAIT, "the script at its pause", || {
        let a = last_step(&out);
        std::thread::sleep(Duration::from_millis(300));
        (a.is_some() && a == last_step(&out)).then_some(a)
    });
    pty.send(" ");
    until(WAIT, "the script going on", || last_step(&out) > p);
    pty.send("q");
    pty.wait_for("stop training?", WAIT);
    pty.send("y");
    let status = pty.wait_exit(WAIT);
    assert!(status.success(), "{status:?}");
    let (_, stopped) = steps(&out);
    assert!(stopped > p, "stopped at {stopped:?}, after the pause at {p:?}");
    let recorded = common::records(&run);
    assert_eq!(recorded.last().unwrap()["reason"], "stopped");
}

#[test]
fn in_a_terminal_a_script_that_ends_before_init_gets_its_output_and_one_line_not_a_dashboard() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let python = common::python();
    let code = "print('no dataset at /data/x'); raise SystemExit(4)";
    let args = ["run", "--run-dir", run.to_str().unwrap(), "--", &python, "-c", code];
    let mut pty = common::pty::PtyRun::spawn(&args, 100, 30, &[("XDG_RUNTIME_DIR", xdg.to_str().unwrap())]);
    let status = pty.wait_exit(WAIT);
    assert_eq!(status.exit_code(), 4, "the script's own status: {}", pty.contents());
    let screen = pty.contents();
    assert!(screen.contains("no dataset at /data/x"), "its output is said: {screen}");
    assert!(screen.contains("exited (exit status 4) before calling dpt_tui.init"), "{screen}");
    assert!(!screen.contains("waiting for the workers"), "no dashboard opened: {screen}");
    assert!(!run.exists());
}
