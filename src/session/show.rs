//! `dpt-tui show RUN [RUN…]`: the dashboard on a recorded run's `metrics.jsonl` (the other runs
//! drawn under it as baselines, with a table of the settings in which they differ), or with
//! `--png` / `--svg` one run's curves as a picture for a report; a sweep's folder, its table of
//! trials (`--csv`: as CSV).

use std::path::{Path, PathBuf};

use anyhow::anyhow;

use super::{dashboard_options, failed, input, theme, watch_signals};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard;
use dpt_tui::record::bottleneck::Account;
use dpt_tui::record::compare::Baseline;
use dpt_tui::record::file::read_timed_records;
use dpt_tui::record::history::History;
use dpt_tui::record::tensorboard::{TensorBoard, TENSORBOARD_DIR};
use dpt_tui::remote::protocol::Snapshot;
use dpt_tui::remote::runs;
use dpt_tui::report::{self, Format};

/// A run's history, or the input error naming the directory.
fn read(run: &Path) -> Result<(std::path::PathBuf, History), Failure> {
    let run_dir = runs::resolve(run);
    let history = History::read(&run_dir).map_err(|e| {
        input(anyhow::Error::new(e).context(format!("{} is not a run directory", run_dir.display())))
    })?;
    Ok((run_dir, history))
}

/// `dpt-tui show RUN --why`: what limited the run's steps, how its report windows were judged,
/// and the last window's verdict.
pub fn why(all: &[PathBuf]) -> Result<u8, Failure> {
    let [one] = all else {
        return Err(input(anyhow!("--why explains one run; name one run directory")));
    };
    let (run_dir, history) = read(one)?;
    let account = Account::of(history.records());
    let Some(run) = &account.run else {
        return Err(input(anyhow!(
            "{} has no timed steps yet: its verdict comes with its first report window after the warm-up",
            run_dir.display()
        )));
    };
    println!("{}", run_dir.display());
    println!("bottleneck over {} timed steps: {}", account.timed_steps, run.line());
    let judged: usize = account.windows.iter().map(|(_, n)| n).sum();
    let counts: Vec<String> =
        account.windows.iter().map(|(cause, n)| format!("{} {n}", cause.label())).collect();
    println!("report windows ({judged}): {}", counts.join(", "));
    if let Some((step, last)) = &account.last {
        println!("last window (step {step}): {}", last.line());
    }
    Ok(0)
}

/// `dpt-tui show RUN --tensorboard`: TensorBoard event files for a run recorded before runs
/// wrote them (or without them); the file is removed again when writing it fails.
pub fn tensorboard(all: &[PathBuf]) -> Result<u8, Failure> {
    let [one] = all else {
        return Err(input(anyhow!("--tensorboard writes one run's event files; name one run directory")));
    };
    let run_dir = runs::resolve(one);
    let records = read_timed_records(&run_dir).map_err(|e| {
        input(anyhow::Error::new(e).context(format!("{} is not a run directory", run_dir.display())))
    })?;
    if records.is_empty() {
        return Err(input(anyhow!("{}/metrics.jsonl holds no records yet", run_dir.display())));
    }
    let dir = run_dir.join(TENSORBOARD_DIR);
    let held = std::fs::read_dir(&dir)
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().contains("tfevents")))
        .unwrap_or(false);
    if held {
        return Err(input(anyhow!(
            "{} already holds event files; remove the folder to write them again",
            dir.display()
        )));
    }
    let first = records.iter().find_map(|(_, t)| *t).unwrap_or_else(dpt_tui::unix_now);
    let mut tb = TensorBoard::create(&run_dir, first, &dpt_tui::hostname())
        .map_err(failed("cannot write the event file"))?;
    for (record, time) in &records {
        if let Err(e) = tb.take(record, &[], time.unwrap_or(first)) {
            let _ = std::fs::remove_file(tb.path());
            return Err(Failure::Run(
                anyhow::Error::new(e).context(format!("cannot write {}", tb.path().display())),
            ));
        }
    }
    println!("wrote {}", tb.path().display());
    Ok(0)
}

pub fn run(all: &[PathBuf], png: Option<&Path>, svg: Option<&Path>, args: &Args) -> Result<u8, Failure> {
    let (first, others) = all.split_first().ok_or_else(|| input(anyhow!("name a run directory to show")))?;
    let (run_dir, history) = read(first)?;
    let mut baselines = Vec::new();
    for other in others {
        let (dir, h) = read(other)?;
        baselines.push(Baseline::of(dashboard::compare::run_name(&dir), h.records()));
    }
    let pictures = [(png, Format::Png), (svg, Format::Svg)];
    if pictures.iter().any(|(p, _)| p.is_some()) {
        if !baselines.is_empty() {
            return Err(input(anyhow!(
                "--png and --svg draw one run; compare runs in the dashboard (drop --png/--svg)"
            )));
        }
        for (path, format) in pictures {
            if let Some(path) = path {
                report::write(history.records(), &run_dir, path, format).map_err(input)?;
                println!("wrote {}", runs::absolute(path).display());
            }
        }
        return Ok(0);
    }
    if history.records().is_empty() {
        return Err(input(anyhow!("{}/metrics.jsonl holds no records yet", run_dir.display())));
    }
    let theme = theme(args)?;
    let watch = watch_signals(args)?;
    let source = dashboard::Source {
        snapshot: Snapshot { records: history.into_records(), monitor: Vec::new() },
        records: crossbeam_channel::never(),
        monitor: crossbeam_channel::never(),
        controls: None,
        attached: false,
        run_dir: Some(run_dir),
        baselines,
        returns: false,
    };
    dashboard::run(source, &watch.messages, dashboard_options(args, theme))
        .map_err(failed("the dashboard failed"))?;
    Ok(0)
}

/// Whether `all` names one sweep's folder.
pub fn is_sweep(all: &[PathBuf]) -> bool {
    matches!(all, [one] if one.join(dpt_tui::sweep::SWEEP_FILE).is_file())
}

/// `dpt-tui show SWEEP [--csv | --png FILE | --svg FILE]`: the sweep's table of trials, as text
/// or CSV, or every trial's curves in one picture.
pub fn sweep(all: &[PathBuf], csv: bool, pictures: [(Option<&Path>, Format); 2]) -> Result<u8, Failure> {
    let [folder] = all else { return Err(input(anyhow!("name one sweep's folder"))) };
    let file = dpt_tui::sweep::SweepFile::read(folder)
        .map_err(input)?
        .ok_or_else(|| input(anyhow!("{} holds no {}", folder.display(), dpt_tui::sweep::SWEEP_FILE)))?;
    if pictures.iter().any(|(p, _)| p.is_some()) {
        let (trials, values) = swept_curves(folder, &file);
        let name = folder
            .file_name()
            .map_or_else(|| folder.display().to_string(), |n| n.to_string_lossy().into_owned());
        let by = file
            .axes
            .first()
            .map_or(String::new(), |a| format!(", by {}", super::sweep::table::short_key(&a.key)));
        let title = format!("{name} — {} trials{by}", trials.len());
        for (path, format) in pictures {
            if let Some(path) = path {
                report::write_sweep(&trials, values, &title, path, format).map_err(input)?;
                println!("wrote {}", runs::absolute(path).display());
            }
        }
        return Ok(0);
    }
    if csv {
        print!("{}", super::sweep::table::csv(folder, &file));
    } else {
        super::sweep::table::print(folder, &file);
    }
    Ok(0)
}

/// Each trial's curves with the value of the sweep's first setting it ran with, and how many
/// values that setting has; trials with nothing recorded yet are left out.
fn swept_curves(folder: &Path, file: &dpt_tui::sweep::SweepFile) -> (Vec<report::sweep::SweptCurves>, usize) {
    let axis = file.axes.first();
    // The values in their order as numbers where they all are numbers (colours then follow
    // the value), else as listed.
    let mut order: Vec<String> = axis.map_or_else(Vec::new, |a| a.values.clone());
    let numbers: Option<Vec<f64>> = order.iter().map(|v| v.parse::<f64>().ok()).collect();
    if let Some(n) = numbers {
        let mut paired: Vec<(f64, String)> = n.into_iter().zip(order).collect();
        paired.sort_by(|a, b| a.0.total_cmp(&b.0));
        order = paired.into_iter().map(|(_, v)| v).collect();
    }
    let mut trials: Vec<report::sweep::SweptCurves> = file
        .trials
        .iter()
        .filter_map(|t| {
            let records = dpt_tui::record::file::read_records(&folder.join(&t.dir)).ok()?;
            let curves = dpt_tui::record::curves::Curves::of(&records);
            if curves.test_loss.is_empty() {
                return None;
            }
            let value = t.values.first().cloned().unwrap_or_default();
            let rank = order.iter().position(|v| *v == value).unwrap_or(0);
            let key = axis.map_or("", |a| super::sweep::table::short_key(&a.key));
            Some(report::sweep::SweptCurves { value: format!("{key}={value}"), rank, curves })
        })
        .collect();
    // Drawn, and named in the legend, in the values' order.
    trials.sort_by_key(|t| t.rank);
    (trials, order.len().max(1))
}
