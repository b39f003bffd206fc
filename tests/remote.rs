//! Training that outlives the terminal: a detached CPU job, viewers attaching and detaching,
//! controls over the socket, protocol errors, refused peers, leaks, `ls`, `show` and `--png`.

use crate::common;
use common::{until, until_record, within, Dpt};

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dpt_tui::engine::{Control, Record};
use dpt_tui::record::Change;
use dpt_tui::remote::client::{attach, attach_stream, server_info, AttachError};
use dpt_tui::remote::protocol::VERSION;

const WAIT: Duration = Duration::from_secs(60);

/// A job started with `--detach` on the shipped subset; stopped when dropped.
struct Job {
    run: PathBuf,
    pid: u32,
    /// The job's own `XDG_RUNTIME_DIR`, where it has one (`Job::start_private`).
    xdg: Option<PathBuf>,
    _tmp: tempfile::TempDir,
}

impl Job {
    fn start(epochs: &str) -> Job {
        Job::start_with(epochs, false)
    }

    /// A job whose socket lives in a registry of its own: no other test's job, which prunes
    /// the registry as it starts, can remove it.
    fn start_private(epochs: &str) -> Job {
        Job::start_with(epochs, true)
    }

    fn start_with(epochs: &str, private: bool) -> Job {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let xdg = private.then(|| tmp.path().join("xdg"));
        let data = common::subset_dir();
        let mut front = Dpt::new();
        if let Some(x) = &xdg {
            std::fs::create_dir_all(x).unwrap();
            front.env("XDG_RUNTIME_DIR", x);
        }
        let out = front
            .args([
                "--detach",
                "--data",
                data.to_str().unwrap(),
                "--devices",
                "cpu:2",
                "--train-limit",
                "600",
            ])
            .args([
                "--batch-size",
                "100",
                "--log-every",
                "2",
                "--epochs",
                epochs,
                "--run-dir",
                run.to_str().unwrap(),
            ])
            .output();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("attach with: dpt-tui attach {}", run.display())), "{stdout}");
        // The front says which process trains (a short job may be over, its server.json gone).
        let pid = stdout
            .lines()
            .find_map(|l| l.strip_prefix("training in the background (pid ")?.split(')').next()?.parse().ok())
            .expect("the job's pid");
        Job { run, pid, xdg, _tmp: tmp }
    }

    /// A command of dpt-tui with this job's registry.
    fn command(&self) -> Dpt {
        let mut c = Dpt::new();
        if let Some(x) = &self.xdg {
            c.env("XDG_RUNTIME_DIR", x);
        }
        c
    }

    fn count(&self, what: &str) -> usize {
        std::fs::read_dir(format!("/proc/{}/{what}", self.pid)).map(|d| d.count()).unwrap_or(0)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

#[test]
fn attach_change_the_lr_detach_and_attach_again() {
    let job = Job::start("1000");
    let first = attach(&job.run, false).unwrap();
    assert!(
        matches!(first.snapshot.records.first(), Some(Record::Start(_))),
        "the snapshot starts at the start"
    );
    until_record(&first.records, WAIT, |e| matches!(e, Record::Step(_)));
    first.controls.send(Control::SetLr { lr: 0.05 }).unwrap();
    until_record(
        &first.records,
        WAIT,
        |e| matches!(e, Record::Event(Change::LrChanged { to, .. }) if *to == 0.05),
    );
    // A second viewer at the same time, read-only: its control is refused, the job unchanged.
    let second = attach(&job.run, true).unwrap();
    second.controls.send(Control::Pause).unwrap();
    until_record(
        &second.records,
        WAIT,
        |e| matches!(e, Record::Event(Change::Refused { reason }) if reason.contains("read-only")),
    );
    until_record(&first.records, WAIT, |e| matches!(e, Record::Step(s) if s.lr == 0.05));
    drop(first);
    drop(second);

    // Attach again: the history holds the change and the curves after it.
    let again = attach(&job.run, false).unwrap();
    let history = &again.snapshot.records;
    assert!(history.iter().any(|e| matches!(e, Record::Event(Change::LrChanged { to, .. }) if *to == 0.05)));
    assert!(history.iter().any(|e| matches!(e, Record::Step(s) if s.lr == 0.05)));
    assert!(history.iter().any(|e| matches!(e, Record::Step(s) if s.lr == 0.2)));
    assert!(!again.snapshot.monitor.is_empty(), "device readings come with the snapshot");
    again.controls.send(Control::Stop).unwrap();
    until_record(&again.records, WAIT, |e| matches!(e, Record::Summary(_)));
    let records = common::wait_for_summary(&job.run, WAIT);
    assert!(records.iter().any(|r| r["event"] == "lr_changed" && r["to"] == 0.05));
    assert_eq!(records.last().unwrap()["reason"], "stopped");
}

#[test]
fn a_viewer_that_leaves_with_its_rewind_dialog_open_lets_the_run_go() {
    let job = Job::start("1000");
    let watch = attach(&job.run, true).unwrap();
    until_record(&watch.records, WAIT, |e| matches!(e, Record::Step(_)));
    let viewer = attach(&job.run, false).unwrap();
    // Asked twice (as a dialog reopened at once might), held once.
    viewer.controls.send(Control::Hold { on: true }).unwrap();
    viewer.controls.send(Control::Hold { on: true }).unwrap();
    let (Record::Event(Change::Paused { global_step: at }), _) =
        until_record(&watch.records, WAIT, |e| matches!(e, Record::Event(Change::Paused { .. })))
    else {
        unreachable!()
    };
    // Gone without closing its dialog (a terminal closed, a viewer killed).
    drop(viewer);
    let (resumed, _) =
        until_record(&watch.records, WAIT, |e| matches!(e, Record::Event(Change::Resumed { .. })));
    assert_eq!(resumed, Record::Event(Change::Resumed { global_step: at }));
    until_record(&watch.records, WAIT, |e| matches!(e, Record::Step(s) if s.global_step > at));
    let stop = attach(&job.run, false).unwrap();
    stop.controls.send(Control::Stop).unwrap();
    until_record(&watch.records, WAIT, |e| matches!(e, Record::Summary(_)));
}

fn raw(job: &Job) -> (UnixStream, std::io::Lines<BufReader<UnixStream>>) {
    let socket = server_info(&job.run).unwrap().socket;
    let stream = UnixStream::connect(socket).unwrap();
    let lines = BufReader::new(stream.try_clone().unwrap()).lines();
    (stream, lines)
}

#[test]
fn version_mismatch_bad_messages_and_foreign_users_leave_the_job_running() {
    let job = Job::start("1000");
    let socket = server_info(&job.run).unwrap().socket;
    match attach_stream(UnixStream::connect(&socket).unwrap(), false, VERSION + 2) {
        Err(AttachError::Refused(m)) => assert!(m.contains("protocol version mismatch"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // A neighbouring version's client is served.
    assert!(attach_stream(UnixStream::connect(&socket).unwrap(), true, VERSION - 1).is_ok());
    // Garbage before and after the hello.
    let (mut s, mut lines) = raw(&job);
    s.write_all(b"{not json\n").unwrap();
    let reply = lines.next().unwrap().unwrap();
    assert!(reply.contains("\"error\"") && reply.contains("bad message"), "{reply}");
    let (mut s, mut lines) = raw(&job);
    s.write_all(format!("{{\"type\":\"hello\",\"version\":{VERSION},\"read_only\":false}}\n").as_bytes())
        .unwrap();
    assert!(lines.next().unwrap().unwrap().contains("welcome"));
    s.write_all(b"{\"type\":\"launch\"}\n").unwrap();
    let reply = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("\"error\""))).unwrap().unwrap();
    assert!(reply.contains("bad message"), "{reply}");
    drop(s);
    // Another user cannot even reach the socket: its folder is private to the job's owner.
    let dir = socket.parent().unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    let sock_mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(sock_mode & 0o777, 0o600);
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "import socket; s=socket.socket(socket.AF_UNIX); s.connect({:?})",
                socket.to_str().unwrap()
            ),
        ])
        .uid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success(), "user nobody connected");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    // The job goes on.
    let viewer = attach(&job.run, false).unwrap();
    until_record(&viewer.records, WAIT, |e| matches!(e, Record::Step(_)));
    viewer.controls.send(Control::Stop).unwrap();
    until_record(&viewer.records, WAIT, |e| matches!(e, Record::Summary(_)));
}

use std::os::unix::process::CommandExt;

#[test]
fn a_hundred_attach_detach_cycles_leak_neither_threads_nor_descriptors() {
    let job = Job::start("1000");
    let warm = attach(&job.run, false).unwrap();
    until_record(&warm.records, WAIT, |e| matches!(e, Record::Step(_)));
    drop(warm);
    let settle = |job: &Job, target: (usize, usize)| {
        until(Duration::from_secs(20), "settling of the threads and descriptors", || {
            let now = (job.count("task"), job.count("fd"));
            match now.0 <= target.0 && now.1 <= target.1 {
                true => Ok(now),
                false => Err(format!("threads/fds {now:?}, before {target:?}")),
            }
        })
    };
    let before = settle(&job, (usize::MAX, usize::MAX));
    for _ in 0..100 {
        let v = attach(&job.run, false).unwrap();
        drop(v);
    }
    // The job's own threads and files may grow by a few meanwhile (its checkpoint thread starts
    // with the first periodic checkpoint, which can fall during the cycles; a checkpoint being
    // written holds a file); what a hundred cycles leaked would be a hundred.
    const PASSING: usize = 3;
    let after = settle(&job, (before.0 + PASSING, before.1 + PASSING));
    assert!(after.0 <= before.0 + PASSING && after.1 <= before.1 + PASSING, "{before:?} -> {after:?}");
    let v = attach(&job.run, false).unwrap();
    v.controls.send(Control::Stop).unwrap();
    until_record(&v.records, WAIT, |e| matches!(e, Record::Summary(_)));
}

#[test]
fn ls_show_png_and_a_dead_job() {
    let job = Job::start("2");
    common::wait_for_summary(&job.run, WAIT);
    let root = job.run.parent().unwrap();
    let ls = Dpt::new().arg("ls").arg(root).output();
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("finished") && l.contains("lenet") && l.contains("2/2")),
        "{text}"
    );

    let png = root.join("curves.png");
    let out = Dpt::new().args(["show"]).arg(&job.run).arg("--png").arg(&png).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let reader = decoder.read_info().expect("a valid PNG");
    assert_eq!((reader.info().width, reader.info().height), (960, 640));

    // `show` opens the dashboard on the record.
    let mut tui = common::pty::PtyRun::spawn(&["show", job.run.to_str().unwrap()], 100, 30, &[]);
    let screen = tui.wait_for("FINISHED", WAIT);
    assert!(screen.contains("epoch 2/2") && screen.contains("train loss"), "{screen}");
    tui.send("q");
    assert!(tui.wait_exit(WAIT).success());

    // A job killed hard leaves a stale socket: `ls` says dead and cleans it; attach explains.
    let job = Job::start_private("1000");
    let socket = server_info(&job.run).unwrap().socket;
    let _ = Command::new("kill").args(["-9", &job.pid.to_string()]).status();
    // Gone, or still a zombie after WAIT (ls and attach are checked either way).
    let _ = within(WAIT, || !Path::new(&format!("/proc/{}", job.pid)).exists());
    let ls = job.command().arg("ls").arg(job.run.parent().unwrap()).output();
    assert!(
        String::from_utf8_lossy(&ls.stdout).lines().any(|l| l.starts_with("dead")),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
    // Listing changes nothing; it says what a prune would remove.
    assert!(socket.exists(), "ls leaves the stale socket alone");
    assert!(
        String::from_utf8_lossy(&ls.stdout).contains("dpt-tui ls --prune"),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
    let pruned = job.command().args(["ls", "--prune"]).arg(job.run.parent().unwrap()).output();
    assert!(pruned.status.success());
    assert!(!socket.exists(), "ls --prune removed the stale socket");
    assert!(!job.run.join("server.json").exists(), "and the dead job's server.json");
    let out = job.command().arg("attach").arg(&job.run).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not running (dead)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_job_that_cannot_serve_viewers_fails_at_start_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tmp.path().join("xdg");
    std::fs::create_dir_all(runtime.join("dpt-tui")).unwrap();
    std::fs::set_permissions(runtime.join("dpt-tui"), std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .unwrap();
    let run = tmp.path().join("run");
    let data = common::subset_dir();
    let out = Dpt::new()
        .args(["--detach", "--data", data.to_str().unwrap(), "--devices", "cpu", "--train-limit", "200"])
        .args(["--run-dir", run.to_str().unwrap()])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("background job exited") && err.contains("is not a private folder"), "{err}");
}

#[test]
fn data_a_background_job_refuses_is_named_and_leaves_no_run_directory() {
    // The front checks the settings and claims the run directory; the job loads the data, once.
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let missing = tmp.path().join("no-such-data");
    let out = Dpt::new()
        .args(["--detach", "--data", missing.to_str().unwrap(), "--devices", "cpu"])
        .args(["--run-dir", run.to_str().unwrap()])
        .env("XDG_RUNTIME_DIR", tmp.path())
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no-such-data") && !err.contains("dpt-tui: dpt-tui:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!run.exists(), "the directory made for the run is gone again");
    // A setting the front can judge is refused before the run directory exists.
    let out = Dpt::new()
        .args(["--detach", "--data", common::subset_dir().to_str().unwrap(), "--lr", "-1"])
        .args(["--run-dir", run.to_str().unwrap()])
        .output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lr"));
    assert!(!run.exists());
    // A finished run whose continuation is refused keeps its config.toml and its log.
    let data = common::subset_dir();
    let first = Dpt::new()
        .args(["--detach", "--data", data.to_str().unwrap(), "--devices", "cpu", "--epochs", "1"])
        .args(["--train-limit", "256", "--test-limit", "128", "--run-dir", run.to_str().unwrap()])
        .env("XDG_RUNTIME_DIR", tmp.path())
        .output();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    common::wait_for_summary(&run, WAIT);
    // The job is gone once it no longer serves (its server.json removed on the way out).
    until(WAIT, "end of the finished job's serving", || !run.join("server.json").exists());
    let config = std::fs::read(run.join("config.toml")).unwrap();
    let log = std::fs::read_to_string(run.join("server.log")).unwrap();
    let out = Dpt::new()
        .args([
            "--detach",
            "--resume",
            run.to_str().unwrap(),
            "--data",
            missing.to_str().unwrap(),
            "--epochs",
            "2",
        ])
        .env("XDG_RUNTIME_DIR", tmp.path())
        .output();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(run.join("config.toml")).unwrap(), config, "the run's settings stay");
    let after = std::fs::read_to_string(run.join("server.log")).unwrap();
    assert!(after.starts_with(&log) && after.len() > log.len(), "the log grows:\n{after}");
}

#[test]
fn a_detached_job_is_listed_and_attached_from_any_directory() {
    // A registry of our own, so other tests' jobs do not count as "the most recent".
    let runtime = tempfile::tempdir().unwrap();
    let xdg = runtime.path().to_str().unwrap();
    let started_in = tempfile::tempdir().unwrap();
    let data = common::subset_dir();
    let out = Dpt::new()
        .dir(started_in.path())
        .env("XDG_RUNTIME_DIR", xdg)
        .args(["--detach", "--data", data.to_str().unwrap(), "--devices", "cpu:2", "--train-limit", "600"])
        .args(["--batch-size", "100", "--log-every", "2", "--epochs", "1000"])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The default run directory is under the starting directory, and every hint is absolute.
    let hint = stdout.lines().find_map(|l| l.strip_prefix("attach with: dpt-tui attach ")).expect("a hint");
    let run = PathBuf::from(hint);
    assert!(run.is_absolute() && run.starts_with(started_in.path().canonicalize().unwrap()), "{stdout}");
    let pid = server_info(&run).expect("server.json").pid;
    let _stop = Job { run: run.clone(), pid, xdg: None, _tmp: tempfile::tempdir().unwrap() };

    // From elsewhere: `ls` lists the running job with its absolute path.
    let elsewhere = tempfile::tempdir().unwrap();
    let ls = Dpt::new().dir(elsewhere.path()).env("XDG_RUNTIME_DIR", xdg).arg("ls").output();
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("running") && l.ends_with(&run.display().to_string())),
        "{text}"
    );

    // A bare `attach` from another directory opens the dashboard on it; `d` detaches.
    let mut tui = common::pty::PtyRun::spawn(&["attach"], 100, 30, &[("XDG_RUNTIME_DIR", xdg)]);
    tui.wait_for("RUNNING", WAIT);
    tui.send("d");
    assert!(tui.wait_exit(WAIT).success());
    assert!(tui.contents().contains("detached; training goes on"), "{}", tui.contents());

    // With no job of ours running, a bare attach says what to do instead.
    let v = attach(&run, false).unwrap();
    v.controls.send(Control::Stop).unwrap();
    until_record(&v.records, WAIT, |e| matches!(e, Record::Summary(_)));
    // Gone, or still a zombie after WAIT (attach is checked either way).
    let _ = within(WAIT, || !Path::new(&format!("/proc/{pid}")).exists());
    let out = Dpt::new().env("XDG_RUNTIME_DIR", xdg).arg("attach").output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none of your jobs is running"));
}
