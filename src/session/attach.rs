//! `dpt-tui attach [RUN]`: the dashboard on a running job, from any directory. Without RUN, the
//! user's most recently started live job.

use std::path::Path;

use anyhow::anyhow;

use super::sweep::watch::{self, Opening};
use super::{dashboard_options, failed, input, theme, watch_signals};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard::{self, app::RunState, theme::Theme};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::record::stats::FinishReason;
use dpt_tui::record::Record;
use dpt_tui::remote::{client, runs};
use dpt_tui::signals;

pub fn run(run: Option<&Path>, read_only: bool, args: &Args) -> Result<u8, Failure> {
    let theme = theme(args)?;
    let run_dir = match run {
        Some(r) => runs::resolve(r),
        None => runs::latest_live().ok_or_else(|| {
            input(anyhow!(
                "none of your jobs is running; 'dpt-tui ls' lists the runs, 'dpt-tui attach DIR' names one"
            ))
        })?,
    };
    if run_dir.join(dpt_tui::sweep::SWEEP_FILE).is_file() {
        let shown = run.map_or_else(|| run_dir.display().to_string(), |r| r.display().to_string());
        return watch::watch(&run_dir, &shown, Opening::Attached { read_only }, args);
    }
    if !client::is_live(&run_dir) {
        let d = run_dir.display();
        let state =
            runs::inspect(&run_dir).map_or("not a run directory".to_owned(), |e| e.state.label().to_owned());
        return Err(input(anyhow!(
            "{d} is not running ({state}); 'dpt-tui show {d}' opens its record, 'dpt-tui --resume {d}' continues it"
        )));
    }
    view_job(&run_dir, read_only, args, theme)
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
