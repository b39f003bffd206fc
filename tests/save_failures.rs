//! A save that fails loses nothing: on a 300 KB file system (a tmpfs mounted in a user
//! namespace of its own, `unshare -rm`), the final weights (516 KB for lenet) cannot be
//! written. Headless, the run retries, then exits 1 without a summary; a background job pauses
//! with the weights in memory until they are saved into another folder.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Dpt;
use dpt_tui::engine::Control;
use dpt_tui::record::{Change, Record};
use dpt_tui::remote::client::server_info;

const WAIT: Duration = Duration::from_secs(60);

/// `dpt-tui args` with a 300 KB tmpfs mounted at `mount`, seen only by it and its children.
fn on_small_fs(mount: &Path, args: &[&str]) -> Dpt {
    std::fs::create_dir_all(mount).unwrap();
    let mount_then_exec = "mount -t tmpfs -o size=300k dpt-test \"$0\" && exec \"$@\"";
    let wrapper = ["-rm", "sh", "-c", mount_then_exec].map(std::ffi::OsStr::new);
    let mut c = Dpt::under("unshare", wrapper.iter().copied().chain([mount.as_os_str()]));
    c.args(args);
    c
}

fn training(run: &Path) -> Vec<String> {
    let data = common::subset_dir();
    [
        "--data",
        data.to_str().unwrap(),
        "--devices",
        "cpu:2",
        "--train-limit",
        "400",
        "--test-limit",
        "100",
        "--batch-size",
        "100",
        "--epochs",
        "1",
        "--run-dir",
        run.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn headless_retries_a_failed_final_save_then_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let mount = tmp.path().join("small");
    let run = mount.join("run");
    let mut args = training(&run);
    args.extend(["--headless", "--save-retries", "2", "--save-retry-secs", "0.1"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = on_small_fs(&mount, &args).output();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let tries: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cannot save")).collect();
    assert_eq!(tries.len(), 3, "the first try and two retries, a line each:\n{stdout}");
    assert!(tries.iter().all(|l| l.contains("No space left on device")), "{stdout}");
    assert!(tries[0].contains("2 tries left") && tries[2].contains("giving up"), "{stdout}");
    assert!(!stdout.contains("test acc:"), "no summary of a run whose weights were lost:\n{stdout}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
}

#[test]
fn a_background_job_pauses_until_its_weights_are_saved_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let mount = tmp.path().join("small");
    let run = mount.join("run");
    let elsewhere = tmp.path().join("elsewhere");
    let mut args = vec!["--detach".to_owned()];
    args.extend(training(&run));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = on_small_fs(&mount, &args).env("XDG_RUNTIME_DIR", runtime.path()).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The run directory is on the small file system, seen only inside the job's namespace;
    // the socket is not, and the hint names it.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("attach with: dpt-tui attach {}", run.display())), "{stdout}");
    let socket = std::fs::read_dir(runtime.path().join("dpt-tui"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("the job's registry entry");
    let info: dpt_tui::remote::registry::ServerInfo =
        serde_json::from_str(&std::fs::read_to_string(socket).unwrap()).unwrap();
    assert!(server_info(&run).is_none(), "run dir is not visible out here");
    let stream = std::os::unix::net::UnixStream::connect(&info.socket).unwrap();
    let viewer =
        dpt_tui::remote::client::attach_stream(stream, false, dpt_tui::remote::protocol::VERSION).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut seen = viewer.snapshot.records.clone();
    let wait_for = |seen: &mut Vec<Record>, want: &dyn Fn(&Record) -> bool| loop {
        if seen.iter().any(want) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        seen.push(viewer.records.recv_timeout(left).expect("the job reports"));
    };
    wait_for(&mut seen, &|r| matches!(r, Record::Event(Change::SaveFailed { .. })));
    wait_for(&mut seen, &|r| matches!(r, Record::Event(Change::Paused { .. })));
    assert!(!seen.iter().any(|r| matches!(r, Record::Summary(_))), "not done while unsaved");
    viewer.controls.send(Control::SaveTo { dir: elsewhere.clone() }).unwrap();
    wait_for(&mut seen, &|r| matches!(r, Record::Summary(_)));
    assert!(seen.iter().any(|r| matches!(r, Record::Event(Change::Saved { path, .. }) if path.starts_with(elsewhere.to_str().unwrap()))));
    let weights = tch::Tensor::read_safetensors(elsewhere.join("model.safetensors")).unwrap();
    assert_eq!(weights.len(), 8, "lenet's tensors");
    assert!(elsewhere.join("checkpoint.safetensors").exists());
    let _ = common::within(WAIT, || !Path::new(&format!("/proc/{}", info.pid)).exists());
}
