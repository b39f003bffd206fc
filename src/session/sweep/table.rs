//! A sweep's table: each trial's swept values, state and results (read from its run's own
//! records), and the trials that differ by their seed alone as mean ± standard deviation. The
//! sweep prints it at its end, `dpt-tui show SWEEP` at any time, `--csv` as CSV.

use std::path::Path;

use dpt_core::best::BestMetric;
use dpt_tui::record::run::RunFold;
use dpt_tui::sweep::{mean_std, seed_groups, SweepFile, TrialState};

pub use dpt_tui::sweep::short_key;

/// What a trial's records say so far, from the one fold of a run's records.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TrialResult {
    pub epochs: usize,
    pub train_loss: Option<f64>,
    pub test_loss: Option<f64>,
    pub test_acc: Option<f64>,
    /// The run's metric (its `--best-metric`; the loss without classes) and its best value.
    pub metric: BestMetric,
    pub best: Option<f64>,
    /// Training time over its epochs (evaluation and pauses left out).
    pub seconds: f64,
    /// Its run ended as asked: every epoch ran, or its early stop or step limit ended it.
    pub completed: bool,
    /// Its loss stopped being finite and `--on-nan stop` ended it.
    pub diverged: bool,
    /// Its user stopped it (from its dashboard or the sweep's).
    pub stopped: bool,
}

impl TrialResult {
    /// The results in `dir`'s records (none where it has none yet).
    pub fn read(dir: &Path) -> TrialResult {
        TrialResult::of(&RunFold::read(dir).unwrap_or_default())
    }

    pub fn of(run: &RunFold) -> TrialResult {
        let last = run.last_epoch();
        TrialResult {
            epochs: run.epochs.len(),
            train_loss: last.map(|e| e.train_loss).filter(|v| v.is_finite()),
            test_loss: last.map(|e| e.test_loss).filter(|v| v.is_finite()),
            test_acc: last.map(|e| e.test_acc),
            metric: run.metric(),
            best: run.best(),
            seconds: run.training_seconds(),
            completed: run.completed(),
            diverged: run.diverged(),
            stopped: run.stopped(),
        }
    }

    /// `test acc 0.812 (best 0.815), train loss 0.52 after 2 epochs`.
    #[cfg(feature = "train")]
    pub fn line(&self) -> String {
        let said = self.said();
        if self.diverged {
            return format!("the loss diverged; {said}");
        }
        said
    }

    #[cfg(feature = "train")]
    fn said(&self) -> String {
        match (self.test_acc, self.best) {
            (Some(acc), Some(best)) => format!(
                "test acc {acc:.4} (best {} {best:.4}), test loss {}, train loss {} after {} epoch{}",
                self.metric.short(),
                num(self.test_loss),
                num(self.train_loss),
                self.epochs,
                if self.epochs == 1 { "" } else { "s" }
            ),
            _ => "no epoch finished".to_owned(),
        }
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"))
}

/// The metric a sweep's trials are judged by: their runs' own (the first trial that evaluated
/// says it; the trials of one sweep share it unless it is swept).
fn sweep_metric(results: &[TrialResult]) -> BestMetric {
    results.iter().find(|r| r.epochs > 0).map_or_else(BestMetric::default, |r| r.metric)
}

/// The table's header and rows, as text cells.
fn cells(folder: &Path, file: &SweepFile) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["trial".to_owned()];
    header.extend(file.axes.iter().map(|a| short_key(&a.key).to_owned()));
    let results: Vec<TrialResult> =
        file.trials.iter().map(|t| TrialResult::read(&folder.join(&t.dir))).collect();
    let best = format!("best {}", sweep_metric(&results).short());
    header.extend(
        ["state", "epochs", "test acc", &best, "test loss", "train loss", "seconds"].map(str::to_owned),
    );
    let rows = file
        .trials
        .iter()
        .zip(&results)
        .map(|(t, r)| {
            let mut row = vec![t.dir.clone()];
            row.extend(t.values.iter().cloned());
            let diverged = t.state == TrialState::Finished && r.diverged;
            row.push(if diverged { "diverged" } else { t.state.label() }.to_owned());
            row.push(r.epochs.to_string());
            row.push(num(r.test_acc));
            row.push(num(r.best));
            row.push(num(r.test_loss));
            row.push(num(r.train_loss));
            row.push(format!("{:.1}", r.seconds));
            row
        })
        .collect();
    (header, rows)
}

/// The table as aligned text, then the seed groups' means, then each failed trial's reason.
pub fn text(folder: &Path, file: &SweepFile) -> String {
    let (header, rows) = cells(folder, file);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(&header)];
    out.extend(rows.iter().map(|r| line(r)));
    out.extend(groups(folder, file));
    for t in file
        .trials
        .iter()
        .filter(|t| matches!(t.state, TrialState::Failed | TrialState::Pruned | TrialState::Stopped))
    {
        let reason = t.reason.as_deref().unwrap_or("no reason recorded");
        out.push(format!("{} {}: {reason}", t.dir, t.state.label()));
    }
    out.join("\n")
}

/// The table as CSV (values quoted where they hold a comma or a quote).
pub fn csv(folder: &Path, file: &SweepFile) -> String {
    let (header, rows) = cells(folder, file);
    let quote = |c: &String| {
        if c.contains([',', '"', '\n']) {
            format!("\"{}\"", c.replace('"', "\"\""))
        } else {
            c.clone()
        }
    };
    std::iter::once(&header)
        .chain(&rows)
        .map(|r| r.iter().map(quote).collect::<Vec<_>>().join(","))
        .map(|l| l + "\n")
        .collect()
}

/// With a seed axis and another: per group of trials that differ by their seed alone, the
/// finished trials' final and best test accuracy as mean ± standard deviation.
fn groups(folder: &Path, file: &SweepFile) -> Vec<String> {
    let Some(seed_axis) = file.seed_axis() else { return Vec::new() };
    if file.axes.len() < 2 {
        return Vec::new();
    }
    let values: Vec<Vec<String>> = file.trials.iter().map(|t| t.values.clone()).collect();
    let mut out =
        vec![String::new(), "over the seeds (finished trials; mean ± standard deviation):".to_owned()];
    for members in seed_groups(&values, Some(seed_axis)) {
        let first = &file.trials[members[0]];
        let name: Vec<String> = file
            .axes
            .iter()
            .zip(&first.values)
            .enumerate()
            .filter(|(a, _)| *a != seed_axis)
            .map(|(_, (axis, v))| format!("{}={v}", short_key(&axis.key)))
            .collect();
        let results: Vec<TrialResult> = members
            .iter()
            .map(|&i| &file.trials[i])
            .filter(|t| t.state == TrialState::Finished)
            .map(|t| TrialResult::read(&folder.join(&t.dir)))
            .collect();
        let finals: Vec<f64> = results.iter().filter_map(|r| r.test_acc).collect();
        let bests: Vec<f64> = results.iter().filter_map(|r| r.best).collect();
        let said = match (mean_std(&finals), mean_std(&bests)) {
            (Some((m, s)), Some((bm, bs))) => format!(
                "test acc {m:.4} ± {s:.4}, best {} {bm:.4} ± {bs:.4} ({} of {} seeds)",
                sweep_metric(&results).short(),
                finals.len(),
                members.len()
            ),
            _ => format!("no finished trial yet (0 of {} seeds)", members.len()),
        };
        out.push(format!("  {}: {said}", name.join(" ")));
    }
    out
}

/// Prints the sweep's table.
pub fn print(folder: &Path, file: &SweepFile) {
    println!("{}", text(folder, file));
}

/// One line of `dpt-tui ls` for the sweep in `folder`: whether a sweep process runs it, its
/// trials by state, and its best trial by the trials' metric (`trial-003 acc 0.8150`).
pub fn summary(folder: &Path, file: &SweepFile) -> (String, String, String) {
    let state = match file.pid.filter(|&p| super::sweep_runs(p)) {
        Some(_) => "running",
        None if file.trials.iter().all(|t| t.state.is_settled()) => "done",
        None => "stopped",
    };
    let states: Vec<TrialState> = file.trials.iter().map(|t| t.state).collect();
    let trials = TrialState::count(&states);
    let results: Vec<TrialResult> =
        file.trials.iter().map(|t| TrialResult::read(&folder.join(&t.dir))).collect();
    let metric = sweep_metric(&results);
    let best = metric.best_of(results.iter().filter_map(|r| r.best));
    let best = file
        .trials
        .iter()
        .zip(&results)
        .find(|(_, r)| r.best.is_some() && r.best == best)
        .map_or("-".to_owned(), |(t, r)| {
            format!("{} {} {:.4}", t.dir, metric.short(), r.best.unwrap_or(f64::NAN))
        });
    (state.to_owned(), trials, best)
}
