//! A sweep in words and numbers: its axes (`--sweep KEY=VALUES`), the trials they cross into
//! (or a random draw of them), the state of every trial as `sweep.json` keeps it, and the
//! trials of the same settings but their seed grouped into a mean and a standard deviation.
//! Running the trials is the binary's (`session::sweep`); stopping them early is `prune.rs`'s.

pub mod prune;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::seed::mix_seed;

/// The file in a sweep's folder that holds its plan and every trial's state.
pub const SWEEP_FILE: &str = "sweep.json";

/// The settings tree's key of the run's seed: the axis trials are grouped over.
pub const SEED_KEY: &str = "recipe.seed";

/// The sweep process's own output, in its folder (a detached sweep's, and each start's error).
pub const SWEEP_LOG: &str = "sweep.log";

/// `sweep.json` cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SweepFileError {
    #[error("cannot read {path}: {cause}")]
    Read { path: std::path::PathBuf, cause: std::io::Error },
    #[error("{path} is not a sweep's state ({cause})")]
    NotASweep { path: std::path::PathBuf, cause: serde_json::Error },
    #[error("cannot write {path}: {cause}")]
    Write { path: std::path::PathBuf, cause: std::io::Error },
}

/// The most values one range may give.
const MOST_VALUES: usize = 10_000;

/// One swept setting: its key in the settings tree and the values it takes, as text the
/// setting's flag reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

impl Axis {
    /// `KEY=VALUES`: a list `0.05,0.1,0.2`, a range of integers `1..5` (both ends included), or
    /// `log:1e-4..1e-2:5` / `lin:0.1..0.5:5` (that many values spaced evenly in the logarithm or
    /// linearly, both ends included).
    pub fn parse(spec: &str) -> Result<Axis, String> {
        let (key, text) = spec
            .split_once('=')
            .ok_or_else(|| format!("--sweep {spec}: expected KEY=VALUES, such as optimizer.lr=0.05,0.1"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("--sweep {spec}: the key is empty"));
        }
        let values = values(text.trim()).map_err(|e| format!("--sweep {spec}: {e}"))?;
        Ok(Axis { key: key.to_owned(), values })
    }
}

/// The values a sweep's `VALUES` stands for.
fn values(text: &str) -> Result<Vec<String>, String> {
    if let Some(spaced) = text.strip_prefix("log:") {
        return spaced_range(spaced, true);
    }
    if let Some(spaced) = text.strip_prefix("lin:") {
        return spaced_range(spaced, false);
    }
    // A range of numbers; anything else with `..` (a path `../data`) is a value.
    let range = text.split_once("..").filter(|(a, b)| {
        !text.contains(',') && a.trim().parse::<f64>().is_ok() && b.trim().parse::<f64>().is_ok()
    });
    if let Some((a, b)) = range {
        let (a, b): (i64, i64) = match (a.trim().parse(), b.trim().parse()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => {
                return Err(format!(
                    "`{text}` is no range of integers; write integers `1..5`, or `log:A..B:N` / `lin:A..B:N` for N values from A to B"
                ))
            }
        };
        if b < a {
            return Err(format!("the range {text} is empty (its end is below its start)"));
        }
        if (b - a) as u64 >= MOST_VALUES as u64 {
            return Err(format!("the range {text} gives more than {MOST_VALUES} values"));
        }
        return Ok((a..=b).map(|v| v.to_string()).collect());
    }
    let listed: Vec<String> = text.split(',').map(|v| v.trim().to_owned()).collect();
    if listed.iter().any(String::is_empty) {
        return Err(format!("`{text}` has an empty value; list values as `0.05,0.1,0.2`"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = listed.iter().find(|v| !seen.insert(v.as_str())) {
        return Err(format!("`{twice}` is listed twice"));
    }
    Ok(listed)
}

/// `A..B:N`: `N` values from `A` to `B`, spaced evenly (in the logarithm when `log`), each
/// written with six significant digits.
fn spaced_range(text: &str, log: bool) -> Result<Vec<String>, String> {
    let form =
        if log { "log:A..B:N, such as log:1e-4..1e-2:5" } else { "lin:A..B:N, such as lin:0.1..0.5:5" };
    let (range, n) = text.rsplit_once(':').ok_or_else(|| format!("expected {form}"))?;
    let (a, b) = range.split_once("..").ok_or_else(|| format!("expected {form}"))?;
    let parsed = (a.trim().parse::<f64>(), b.trim().parse::<f64>(), n.trim().parse::<usize>());
    let (Ok(a), Ok(b), Ok(n)) = parsed else { return Err(format!("expected {form}")) };
    if !(a.is_finite() && b.is_finite()) {
        return Err(format!("expected {form} with finite ends"));
    }
    if n == 0 {
        return Err(format!("the range {text} is empty (N is 0)"));
    }
    if n > MOST_VALUES {
        return Err(format!("the range {text} gives more than {MOST_VALUES} values"));
    }
    if b < a {
        return Err(format!("the range {text} is empty (its end is below its start)"));
    }
    if log && a <= 0.0 {
        return Err(format!("a log range needs positive ends: {text}"));
    }
    let at = |i: usize| {
        let t = if n == 1 { 0.0 } else { i as f64 / (n - 1) as f64 };
        if log {
            10f64.powf(a.log10() + t * (b.log10() - a.log10()))
        } else {
            a + t * (b - a)
        }
    };
    let values: Vec<String> = (0..n).map(|i| short(at(i))).collect();
    let mut dedup = values.clone();
    dedup.dedup();
    if dedup.len() != values.len() {
        return Err(format!("the range {text} repeats a value at six significant digits"));
    }
    Ok(values)
}

/// `v` at six significant digits, written as briefly as Rust writes that number.
fn short(v: f64) -> String {
    let rounded: f64 = format!("{v:.5e}").parse().unwrap_or(v);
    format!("{rounded}")
}

/// The trials `axes` make: every combination of their values (the last axis varying fastest),
/// or with `random` = `(n, seed)` `n` distinct combinations drawn from them by `seed`, in the
/// order of the full crossing. More than `most` trials is refused.
pub fn trials(axes: &[Axis], random: Option<(usize, u64)>, most: usize) -> Result<Vec<Vec<String>>, String> {
    let total = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.values.len()));
    let total = total.unwrap_or(usize::MAX);
    let count = match random {
        None => total,
        Some((0, _)) => return Err("--sweep-random 0 draws no trial; give at least 1".to_owned()),
        Some((n, _)) if n > total => {
            return Err(format!(
                "--sweep-random {n} asks for more trials than the {total} the --sweep values make; give at most {total}"
            ))
        }
        Some((n, _)) => n,
    };
    // Refused before anything the size of the count is made.
    if count > most {
        return Err(format!(
            "the sweep makes {} trials, more than --max-trials {most}: sweep fewer values, draw some with --sweep-random N, or raise --max-trials",
            if count == usize::MAX { "too many".to_owned() } else { count.to_string() }
        ));
    }
    let chosen: Vec<usize> = match random {
        Some((n, seed)) => draw(total, n, seed),
        None => (0..total).collect(),
    };
    Ok(chosen.into_iter().map(|i| combination(axes, i)).collect())
}

/// Combination `i` of the full crossing, the last axis varying fastest.
fn combination(axes: &[Axis], mut i: usize) -> Vec<String> {
    let mut out = vec![String::new(); axes.len()];
    for (slot, axis) in out.iter_mut().zip(axes).rev() {
        let n = axis.values.len();
        *slot = axis.values[i % n].clone();
        i /= n;
    }
    out
}

/// `n` distinct indices below `total`, drawn by `seed` (a partial Fisher–Yates shuffle over
/// the chosen ones only), sorted.
fn draw(total: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut swapped: BTreeMap<usize, usize> = BTreeMap::new();
    let mut picked = Vec::with_capacity(n);
    for i in 0..n {
        let r = mix_seed(seed, i as u64);
        let j = i + (r % (total - i) as u64) as usize;
        let at_j = *swapped.get(&j).unwrap_or(&j);
        let at_i = *swapped.get(&i).unwrap_or(&i);
        swapped.insert(j, at_i);
        picked.push(at_j);
    }
    picked.sort_unstable();
    picked
}

/// Where a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialState {
    /// Not started yet.
    Pending,
    /// Started by a sweep process (`pid`), not seen to end.
    Running,
    /// Stopped by a signal with its checkpoint: the same sweep command continues it.
    Interrupted,
    Finished,
    /// Stopped early by `--prune` for falling behind; not run again.
    Pruned,
    /// Stopped by its user (from its dashboard or the sweep's); not run again.
    Stopped,
    Failed,
}

impl TrialState {
    /// Every state, in the order a count of trials names them.
    pub const ORDER: [TrialState; 7] = [
        TrialState::Running,
        TrialState::Finished,
        TrialState::Pruned,
        TrialState::Stopped,
        TrialState::Interrupted,
        TrialState::Failed,
        TrialState::Pending,
    ];

    /// Trials counted by state: `2 running, 1 finished, 1 pending of 4`.
    pub fn count(states: &[TrialState]) -> String {
        let counts: Vec<String> = TrialState::ORDER
            .iter()
            .filter_map(|s| {
                let n = states.iter().filter(|t| *t == s).count();
                (n > 0).then(|| format!("{n} {}", s.label()))
            })
            .collect();
        format!("{} of {}", counts.join(", "), states.len())
    }

    /// A trial kept as it is by the same command run again: finished, pruned or stopped.
    pub fn is_settled(self) -> bool {
        matches!(self, TrialState::Finished | TrialState::Pruned | TrialState::Stopped)
    }

    pub fn label(self) -> &'static str {
        match self {
            TrialState::Pending => "pending",
            TrialState::Running => "running",
            TrialState::Interrupted => "interrupted",
            TrialState::Finished => "finished",
            TrialState::Pruned => "pruned",
            TrialState::Stopped => "stopped",
            TrialState::Failed => "failed",
        }
    }
}

/// A key as a table names it: its last part (`lr` for `optimizer.lr`), or its section where
/// that says more (`model` for `model.name`, `data` for `data.path`).
pub fn short_key(key: &str) -> &str {
    match key.rsplit_once('.') {
        Some((section, "name" | "path")) => section,
        Some((_, last)) => last,
        None => key,
    }
}

/// One trial as `sweep.json` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Its swept values, one per axis.
    pub values: Vec<String>,
    /// Its run directory, inside the sweep's folder.
    pub dir: String,
    pub state: TrialState,
    /// Why it failed (the run's own last error line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The process running it, while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The devices it ran on last.
    #[serde(default)]
    pub devices: String,
    /// Under `--prune asha`, its value at each rung it reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rungs: Vec<f64>,
}

/// A sweep's plan and its trials' states: `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepFile {
    /// The training command's arguments every trial shares (the sweep's own flags left out).
    pub command: Vec<String>,
    pub axes: Vec<Axis>,
    pub trials: Vec<Trial>,
    /// The sweep process running it, while one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl SweepFile {
    /// The `sweep.json` of the sweep in `folder`; none where the folder has none.
    pub fn read(folder: &Path) -> Result<Option<SweepFile>, SweepFileError> {
        let path = folder.join(SWEEP_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => return Err(SweepFileError::Read { path, cause }),
        };
        serde_json::from_str(&text).map(Some).map_err(|cause| SweepFileError::NotASweep { path, cause })
    }

    /// Writes `folder`'s `sweep.json` whole: a reader sees the earlier state or this one.
    pub fn write(&self, folder: &Path) -> Result<(), SweepFileError> {
        let path = folder.join(SWEEP_FILE);
        let text = serde_json::to_string_pretty(self).expect("a sweep's state serializes");
        crate::atomic::write_bytes(&path, text.as_bytes())
            .map_err(|cause| SweepFileError::Write { path, cause })
    }

    /// The axis of the seed (`--sweep seed=…`), whose trials are grouped into means.
    pub fn seed_axis(&self) -> Option<usize> {
        self.axes.iter().position(|a| a.key == SEED_KEY)
    }

    /// Whether `other` is the same sweep (same shared command, axes and trials), whatever
    /// its trials' states.
    pub fn same_plan(&self, other: &SweepFile) -> bool {
        self.command == other.command
            && self.axes == other.axes
            && self.trials.len() == other.trials.len()
            && self.trials.iter().zip(&other.trials).all(|(a, b)| a.values == b.values && a.dir == b.dir)
    }
}

/// Trials of the same swept values but the seed's (`seed_axis`), grouped: each group's trial
/// indices, in the order of their first trial. Without a seed axis every trial is its own group.
pub fn seed_groups(trials: &[Vec<String>], seed_axis: Option<usize>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    for (i, values) in trials.iter().enumerate() {
        let key: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(a, _)| Some(*a) != seed_axis)
            .map(|(_, v)| v.clone())
            .collect();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// The mean and the sample standard deviation (n − 1; 0 for one value) of `values`.
pub fn mean_std(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() == 1 {
        return Some((mean, 0.0));
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_file_reads_back_what_it_wrote_and_a_folder_without_one_has_none() {
        let dir = tempfile::tempdir().expect("temp");
        assert!(SweepFile::read(dir.path()).expect("no file").is_none());
        let file = SweepFile {
            command: vec!["--epochs".into(), "1".into()],
            axes: vec![],
            trials: vec![],
            pid: Some(7),
        };
        file.write(dir.path()).expect("written");
        assert_eq!(SweepFile::read(dir.path()).expect("read").as_ref(), Some(&file));
        std::fs::write(dir.path().join(SWEEP_FILE), "{").expect("write");
        let e = SweepFile::read(dir.path()).expect_err("refused").to_string();
        assert!(e.ends_with(")") && e.contains("is not a sweep's state"), "{e}");
        // A folder that is not there: the write says which file it could not write.
        let gone = dir.path().join("gone");
        let e = file.write(&gone).expect_err("no folder");
        assert!(matches!(e, SweepFileError::Write { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!("cannot write {}", gone.join(SWEEP_FILE).display())),
            "{e}"
        );
        // A sweep.json that cannot be read (a folder by that name) is an error, not "no sweep".
        let odd = dir.path().join("odd");
        std::fs::create_dir_all(odd.join(SWEEP_FILE)).expect("dirs");
        let e = SweepFile::read(&odd).expect_err("unreadable");
        assert!(matches!(e, SweepFileError::Read { .. }), "{e:?}");
    }

    fn axis(spec: &str) -> Axis {
        Axis::parse(spec).unwrap()
    }

    #[test]
    fn values_are_lists_integer_ranges_or_spaced_ranges() {
        assert_eq!(axis("optimizer.lr=0.05, 0.1,0.2").values, ["0.05", "0.1", "0.2"]);
        assert_eq!(axis("seed=1..4").values, ["1", "2", "3", "4"]);
        assert_eq!(axis("seed=3..3").values, ["3"]);
        assert_eq!(
            axis("lr=log:1e-4..1e-2:5").values,
            ["0.0001", "0.000316228", "0.001", "0.00316228", "0.01"]
        );
        assert_eq!(axis("lr=lin:0.1..0.5:5").values, ["0.1", "0.2", "0.3", "0.4", "0.5"]);
        assert_eq!(axis("lr=log:0.1..0.1:1").values, ["0.1"]);
        assert_eq!(axis("model.name=lenet,mnist-net").key, "model.name");
        assert_eq!(axis("data=../a,../b").values, ["../a", "../b"], "paths are values, not ranges");
        assert_eq!(axis("data=../a").values, ["../a"]);
    }

    #[test]
    fn bad_values_are_refused_with_what_to_write() {
        let err = |spec: &str| Axis::parse(spec).unwrap_err();
        assert!(err("lr").contains("expected KEY=VALUES"));
        assert!(err("=1,2").contains("the key is empty"));
        assert!(err("seed=5..1").contains("is empty (its end is below its start)"), "{}", err("seed=5..1"));
        assert!(err("lr=0.1..0.5").contains("no range of integers"));
        assert!(err("lr=log:0..1:3").contains("positive ends"));
        assert!(err("lr=log:1e-3..1e-2:0").contains("is empty (N is 0)"));
        assert!(err("lr=log:1e-3..1e-2").contains("expected log:A..B:N"));
        assert!(err("lr=0.1,,0.2").contains("an empty value"));
        assert!(err("lr=0.1,0.1").contains("listed twice"));
        assert!(err("seed=0..100000").contains("more than"));
    }

    #[test]
    fn trials_cross_the_axes_with_the_last_fastest() {
        let axes = [axis("lr=0.1,0.2"), axis("seed=1..3")];
        let t = trials(&axes, None, 256).unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(t[0], ["0.1", "1"]);
        assert_eq!(t[1], ["0.1", "2"]);
        assert_eq!(t[3], ["0.2", "1"]);
        let too_many = trials(&axes, None, 5).unwrap_err();
        assert!(too_many.contains("makes 6 trials, more than --max-trials 5"), "{too_many}");
    }

    #[test]
    fn a_random_draw_is_distinct_reproducible_and_within_the_crossing() {
        let axes = [axis("lr=log:1e-4..1e-1:10"), axis("seed=1..10")];
        let a = trials(&axes, Some((20, 7)), 256).unwrap();
        assert_eq!(a, trials(&axes, Some((20, 7)), 256).unwrap(), "the same seed draws the same");
        assert_ne!(a, trials(&axes, Some((20, 8)), 256).unwrap());
        let mut unique = a.clone();
        unique.dedup();
        assert_eq!(unique.len(), 20, "distinct and in crossing order");
        let all = trials(&axes, Some((100, 1)), 256).unwrap();
        assert_eq!(all, trials(&axes, None, 256).unwrap(), "drawing all is the crossing");
        assert!(trials(&axes, Some((101, 1)), 256).unwrap_err().contains("at most 100"));
        assert!(trials(&axes, Some((0, 1)), 256).unwrap_err().contains("no trial"));
        assert!(trials(&axes, Some((20, 1)), 10).unwrap_err().contains("makes 20 trials"));
        let huge = [axis("a=log:1e-4..1e-1:10000"), axis("b=1..10000")];
        assert!(trials(&huge, Some((1_000_000, 1)), 256).unwrap_err().contains("more than --max-trials 256"));
        assert_eq!(trials(&[axis("seed=1..3")], None, usize::MAX).unwrap().len(), 3, "no overflow");
    }

    #[test]
    fn trials_differing_by_their_seed_alone_are_grouped() {
        let axes = [axis("lr=0.1,0.2"), axis("seed=1..2")];
        let t = trials(&axes, None, 256).unwrap();
        assert_eq!(seed_groups(&t, Some(1)), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(seed_groups(&t, None), vec![vec![0], vec![1], vec![2], vec![3]]);
        let (mean, std) = mean_std(&[0.5, 0.7]).unwrap();
        assert!((mean - 0.6).abs() < 1e-12 && (std - 0.02f64.sqrt()).abs() < 1e-12);
        assert_eq!(mean_std(&[0.3]), Some((0.3, 0.0)));
        assert_eq!(mean_std(&[]), None);
    }
}
