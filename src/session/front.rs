//! The dashboard front: starts the training as a background job (its own session, output in
//! `server.log` in the run directory) and opens the dashboard on it, or with `--detach` just
//! says how to attach. The job goes on when the dashboard closes or the terminal goes away.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::configure::prepare_front;
use super::{dashboard_options, failed, theme, watch_signals};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard::{self, app::RunState, theme::Theme};
use dpt_tui::device::Machine;
use dpt_tui::engine::FinishReason;
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::record::Record;
use dpt_tui::remote::client;
use dpt_tui::signals;

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
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            let last = last.strip_prefix("dpt-tui: ").unwrap_or(last).to_owned();
            if status.code() == Some(2) {
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
    view_job(&run_dir, false, args, theme)
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

/// The dashboard on the job of `run_dir`, and the exit status that follows.
pub fn view_job(run_dir: &Path, read_only: bool, args: &Args, theme: Theme) -> Result<u8, Failure> {
    let attached = client::attach(run_dir, read_only).map_err(|e| Failure::Run(e.into()))?;
    let watch = watch_signals(args)?;
    let source = dashboard::Source::job(attached, run_dir, read_only);
    let end = dashboard::run(source, &watch.messages, dashboard_options(args, theme))
        .map_err(failed("the dashboard failed"))?;
    let dir = run_dir.display();
    if end.app.viewer.detached || end.hangup {
        println!("detached; training goes on. attach with: dpt-tui attach {dir}");
        return Ok(0);
    }
    let stopped_early = end.app.run.summary.as_ref().is_some_and(|s| s.reason != FinishReason::Completed);
    if let Some(summary) = end.app.run.summary {
        HeadlessPrinter::default().print(&Record::Summary(Box::new(summary)), &mut std::io::stdout());
    }
    println!("run directory: {dir}");
    if stopped_early && end.interrupted.is_none() {
        println!("resume with: dpt-tui --resume {dir}");
    }
    if end.app.run.state == RunState::Disconnected {
        if client::is_live(run_dir) {
            println!("lost the connection to the job; it goes on. attach with: dpt-tui attach {dir}");
            return Ok(0);
        }
        println!("{}", super::resume_from_checkpoint(run_dir));
        return Err(Failure::Run(anyhow!(
            "the job ended without a final report; see {}",
            run_dir.join("server.log").display()
        )));
    }
    if let Some(message) = end.app.run.failure {
        println!("{}", super::resume_from_checkpoint(run_dir));
        return Err(Failure::Run(anyhow!("training failed: {message}")));
    }
    if let Some(signal) = end.interrupted {
        println!("stopped by {}; resume with: dpt-tui --resume {dir}", signals::name(signal));
        return Ok(signals::exit_code(signal));
    }
    Ok(0)
}
