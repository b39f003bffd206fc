//! `pip install ./python` as a user runs it: the wheel the client's build backend makes (the
//! `dpt_tui` package and dpt-tui built without training), installed into a new virtualenv. The
//! binary there has no libtorch and says what it is; a loop without torch, started with that
//! virtualenv's plain `python`, starts the backend from PATH, is paused and stopped through the
//! attach socket, and the same binary's `ls` and `show` read its run. A binary of its own: the
//! wheel's build takes the cores for minutes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::steering::{last_step, paused_at, step_past, steps, stop_at, WAIT};
use common::{until, until_record};
use dpt_tui::engine::{Control, Record};
use dpt_tui::record::{Change, FinishReason};
use dpt_tui::remote::client::{self, Attached};

/// `program args`, which must succeed; its stdout.
fn succeeds(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The wheel `pip install ./python` builds, made by the set-up's pip without build isolation
/// (its maturin is the one `.ci/setup` installs). Its cargo build keeps its own target folder
/// under the test target's, so a later run compiles only what changed.
fn build_wheel(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    succeeds(
        Command::new(common::python())
            .args(["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check"])
            .arg("--wheel-dir")
            .arg(dir)
            .arg(root.join("python"))
            .env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("wheel-target")),
    );
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(wheels.len(), 1, "one wheel: {wheels:?}");
    wheels.remove(0)
}

/// A new virtualenv with the wheel installed from the file alone; its `bin/`.
fn install(wheel: &Path, venv: &Path) -> PathBuf {
    succeeds(Command::new(common::python()).args(["-m", "venv"]).arg(venv));
    let bin = venv.join("bin");
    succeeds(
        Command::new(bin.join("python"))
            .args(["-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check"])
            .arg(wheel),
    );
    bin
}

#[test]
fn pip_install_gives_a_torch_free_dpt_tui_that_watches_and_steers_a_script() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&tmp.path().join("wheels"));
    let bin = install(&wheel, &tmp.path().join("venv"));
    let dpt = bin.join("dpt-tui");

    // The binary beside the client: no libtorch linked (a linked library's name is in the
    // binary's dynamic string table), and it says what it is.
    let bytes = std::fs::read(&dpt).unwrap();
    for lib in [&b"libtorch_cpu.so"[..], b"libc10.so"] {
        assert!(!bytes.windows(lib.len()).any(|w| w == lib), "{} linked", String::from_utf8_lossy(lib));
    }
    assert!(succeeds(Command::new(&dpt).arg("--version")).contains("monitor, built without libtorch"));
    let train = Command::new(&dpt).args(["--epochs", "1"]).output().unwrap();
    assert_eq!(train.status.code(), Some(2), "{}", said(&train));
    let line = String::from_utf8_lossy(&train.stderr);
    assert!(line.contains("needs libtorch") && line.lines().count() == 1, "{line}");

    // A loop started as the quick start says: the virtualenv's python, dpt-tui on its PATH.
    let run = tmp.path().join("run");
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let out = tmp.path().join("steps.jsonl");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut script = Command::new(bin.join("python"))
        .arg(common::script("client/pure_loop.py"))
        .arg(&out)
        .env("PATH", path)
        .env("DPT_TUI_RUN_DIR", &run)
        .env("XDG_RUNTIME_DIR", &xdg)
        .env_remove("DPT_TUI_BIN")
        .env_remove("DPT_TUI_ENDPOINT")
        .env_remove("PYTHONPATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until(WAIT, "the backend serving the run", || {
        client::is_live(&run) || script.try_wait().unwrap().is_some()
    });
    let Attached { records, controls, monitor: _monitor, .. } =
        client::attach(&run, false).unwrap_or_else(|e| panic!("{e}"));
    step_past(&records, 3);
    controls.send(Control::Pause).unwrap();
    let p = paused_at(&records);
    until(WAIT, "the script waiting at its pause", || last_step(&out) == Some(p));
    controls.send(Control::SetLr { lr: 0.5 }).unwrap();
    let (refused, _) = until_record(&records, WAIT, |r| matches!(r, Record::Event(Change::Refused { .. })));
    assert!(format!("{refused:?}").contains("no optimizer"), "{refused:?}");
    controls.send(Control::Resume).unwrap();
    step_past(&records, p + 2);
    controls.send(Control::Stop).unwrap();
    let s = stop_at(&records);
    let (summary, _) = until_record(&records, WAIT, |r| matches!(r, Record::Summary(_)));
    let Record::Summary(summary) = summary else { unreachable!() };
    assert_eq!((summary.reason, summary.global_steps), (FinishReason::Stopped, s));
    let ended = script.wait_with_output().unwrap();
    assert!(ended.status.success(), "{}", said(&ended));
    assert_eq!(steps(&out).1, Some(s), "the script stopped at the step the stop was asked at");

    // The same binary reads the run back.
    until(WAIT, "the backend gone", || !run.join("server.json").exists());
    let listed = succeeds(Command::new(&dpt).arg("ls").arg(tmp.path()).env("XDG_RUNTIME_DIR", &xdg));
    // Its label, its step (it gave no total) and its state, not a built-in model's epochs.
    assert!(listed.contains("pure") && listed.contains(&format!("{s} steps")), "{listed}");
    assert!(listed.contains("stopped") && !listed.contains("lenet"), "{listed}");
    let png = tmp.path().join("curves.png");
    succeeds(Command::new(&dpt).arg("show").arg(&run).arg("--png").arg(&png));
    assert!(std::fs::metadata(&png).unwrap().len() > 0);
}
