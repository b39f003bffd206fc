//! The dashboard front: starts the training as a background job (its own session, output in
//! `server.log` in the run directory) and opens the dashboard on it, or with `--detach` just
//! says how to attach. The job goes on when the dashboard closes or the terminal goes away.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::configure::prepare_front;
use super::{failed, theme};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::device::Machine;
use dpt_tui::remote::client;

/// How long the front waits for its job to serve (loading a large data set included).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// Starts the background job, then attaches the dashboard to it.
pub fn run(
    args: &Args,
    asked: &dpt_tui::settings::Settings,
    machine: Machine,
    terminal: bool,
) -> Result<u8, Failure> {
    let theme = theme(args)?;
    let devices = super::dist::devices(asked, machine, None)?;
    // A directory this front makes is removed again if the job refuses its input.
    let fresh = args.resume.is_none() && args.run_dir.as_ref().is_none_or(|d| !d.exists());
    // The job loads the data (once); this process needs none of it.
    let run_dir = prepare_front(args, machine, devices)?;
    let log_path = run_dir.join("server.log");
    // Appended to: a continued run keeps its earlier attempts' output, also when this one is
    // refused.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(failed("cannot open server.log"))?;
    let exe = std::env::current_exe().map_err(failed("cannot find the dpt-tui executable"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1).filter(|a| a != "--detach")).arg("--serve");
    if args.run_dir.is_none() && args.resume.is_none() {
        cmd.arg("--run-dir").arg(&run_dir);
    }
    let err_log = log.try_clone().map_err(failed("cannot open server.log"))?;
    cmd.stdin(std::process::Stdio::null()).stdout(log).stderr(err_log);
    dpt_tui::sys::in_new_session(&mut cmd);
    let mut child = cmd.spawn().map_err(failed("cannot start the background job"))?;
    // Wait for the job to serve its socket (or to fail on the way).
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if client::server_info(&run_dir).is_some_and(|i| i.pid == child.id()) && client::is_live(&run_dir) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            // Its failure's line, else whatever it said last.
            let last = dpt_tui::said_error(&text)
                .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("")
                .to_owned();
            if status.code() == Some(i32::from(dpt_tui::exit::BAD_INPUT)) {
                // Refused input (the data, most often): nothing was trained, so a directory
                // made for this run goes again.
                if fresh {
                    remove_unused(&run_dir);
                }
                return Err(Failure::Input(anyhow!("{last}")));
            }
            return Err(Failure::Run(anyhow!("the background job exited ({status}): {last}")));
        }
        if Instant::now() > deadline {
            return Err(Failure::Run(anyhow!(
                "the background job did not start; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if args.detach || !terminal {
        println!("training in the background (pid {}), logging to {}", child.id(), log_path.display());
        println!("attach with: dpt-tui attach {}", run_dir.display());
        return Ok(0);
    }
    // The job ends while the dashboard may stay open on its summary: reap it then, so it does
    // not linger as a zombie until the dashboard closes.
    std::thread::Builder::new()
        .name("dpt-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        })
        .map_err(failed("cannot start the job's reaper thread"))?;
    super::attach::view_job(&run_dir, false, args, theme)
}

/// Removes a run directory this front made when it holds nothing but the job's log (and its
/// config.toml); anything else in it stays, log included.
fn remove_unused(run_dir: &Path) {
    let ours = ["server.log", super::config_file::CONFIG_FILE];
    let Ok(entries) = std::fs::read_dir(run_dir) else { return };
    let names: Vec<std::ffi::OsString> = entries.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
    if names.iter().all(|n| ours.iter().any(|o| n == o)) {
        for file in ours {
            let _ = std::fs::remove_file(run_dir.join(file));
        }
        let _ = std::fs::remove_dir(run_dir);
    }
}
