//! `dpt-tui ls [DIR] [--prune]`: the user's live jobs, wherever they run, the runs under DIR
//! (default `./runs`) and the sweeps there. Listing changes nothing; `--prune` removes what
//! dead jobs left.

use std::path::Path;

use super::failed;
use crate::Failure;
use dpt_core::best::BestMetric;
use dpt_tui::remote::{registry, runs};

pub fn run(dir: &Path, prune: bool) -> Result<u8, Failure> {
    if prune {
        let cleaned = registry::prune().map_err(failed("cannot prune the job registry"))?;
        for d in &cleaned {
            println!("pruned the dead job of {}", d.display());
        }
        if cleaned.is_empty() {
            println!("nothing to prune");
        }
    }
    let listing = runs::listing(dir);
    let sweeps = sweeps_in(dir);
    if listing.runs.is_empty() && sweeps.is_empty() {
        println!("no running jobs, and no runs in {}", runs::absolute(dir).display());
    } else if !listing.runs.is_empty() {
        println!("{:<10} {:<12} {:<18} {:>15} {:>10}  RUN", "STATE", "MODEL", "DEVICES", "PROGRESS", "BEST");
        for r in &listing.runs {
            let state =
                if r.resumable { format!("{}*", r.state.label()) } else { r.state.label().to_owned() };
            // Accuracy, or "loss 1.234" for a run judged by its loss.
            let acc = r.best.map_or("-".to_owned(), |b| b.cell(b.metric == BestMetric::ValLoss));
            println!(
                "{:<10} {:<12} {:<18} {:>15} {:>10}  {}",
                state,
                r.label.as_deref().unwrap_or("?"),
                r.devices.join(","),
                match r.steps {
                    Some((done, Some(n))) => format!("{done}/{n} steps"),
                    Some((done, None)) => format!("{done} steps"),
                    None => format!("{}/{} epochs", r.epochs_done, r.epochs),
                },
                acc,
                r.path.display()
            );
        }
        if listing.runs.iter().any(|r| r.resumable) {
            println!("(* resumable: dpt-tui --resume RUN)");
        }
    }
    print_sweeps(&sweeps, !listing.runs.is_empty());
    if listing.stale > 0 && !prune {
        println!("{} dead job(s) left a socket behind; 'dpt-tui ls --prune' removes them", listing.stale);
    }
    Ok(0)
}

/// The sweeps in `dir`'s folders (a folder with a `sweep.json`), newest first.
fn sweeps_in(dir: &Path) -> Vec<(std::path::PathBuf, dpt_tui::sweep::SweepFile)> {
    let mut found: Vec<(std::time::SystemTime, std::path::PathBuf, dpt_tui::sweep::SweepFile)> =
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter_map(|p| {
                        let state = p.join(dpt_tui::sweep::SWEEP_FILE);
                        let modified = std::fs::metadata(&state).and_then(|m| m.modified()).ok()?;
                        let file = dpt_tui::sweep::SweepFile::read(&p).ok()??;
                        Some((modified, p, file))
                    })
                    .collect()
            })
            .unwrap_or_default();
    found.sort_by_key(|e| std::cmp::Reverse(e.0));
    found.into_iter().map(|(_, p, f)| (p, f)).collect()
}

/// The sweeps' table, apart from the runs' above it (`after_runs`).
fn print_sweeps(sweeps: &[(std::path::PathBuf, dpt_tui::sweep::SweepFile)], after_runs: bool) {
    if sweeps.is_empty() {
        return;
    }
    if after_runs {
        println!();
    }
    println!("{:<10} {:<44} {:<26}  SWEEP", "STATE", "TRIALS", "BEST");
    for (path, file) in sweeps {
        let (state, trials, best) = super::sweep::table::summary(path, file);
        println!("{state:<10} {trials:<44} {best:<26}  {}", path.display());
    }
}
