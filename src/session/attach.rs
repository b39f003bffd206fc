//! `dpt-tui attach [RUN]`: the dashboard on a running job, from any directory. Without RUN, the
//! user's most recently started live job.

use std::path::Path;

use anyhow::anyhow;

use super::front::view_job;
use super::{input, theme};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::remote::{client, runs};

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
        return super::sweep::watch::watch(&run_dir, &shown, read_only, false, args);
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
