//! Runs side by side: a finished run's curves as a baseline under another's, and the settings
//! in which the runs differ (what a comparison is about).

use super::curves::Curves;
use super::run::RunFold;
use super::{Record, RunInfo};
use crate::best::BestMetric;
use crate::record::text::device_list;

/// A recorded run drawn under the current one.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The run directory's name, as the legend says it.
    pub name: String,
    pub curves: Curves,
    pub info: Option<RunInfo>,
    pub best: Option<Best>,
}

/// A run's best evaluation by the metric it judges by (`RunInfo::judged_metric`): a
/// classifier's highest test accuracy unless it asked for its loss, the lowest val loss of a
/// run without classes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Best {
    pub metric: BestMetric,
    pub value: f64,
}

impl Best {
    /// The best evaluation in `records` (`None` before the first), as the run's fold has it.
    pub fn of(records: &[Record]) -> Option<Best> {
        let run = RunFold::of(records);
        Some(Best { metric: run.metric(), value: run.best()? })
    }

    /// The best evaluation of a run's curves, by the metric of the run `info` describes (the
    /// accuracy, or the loss for curves without classes, where there is no start record).
    pub fn of_curves(c: &Curves, info: Option<&RunInfo>) -> Option<Best> {
        let metric = info.map_or(BestMetric::default().judged(!c.no_classes), RunInfo::judged_metric);
        let series = match metric {
            BestMetric::ValAcc => &c.test_acc,
            BestMetric::ValLoss => &c.test_loss,
        };
        Some(Best { metric, value: metric.best_of(series.iter().map(|p| p.1))? })
    }

    /// What is measured: `best test acc` or `best val loss`.
    pub fn label(self) -> &'static str {
        match self.metric {
            BestMetric::ValAcc => "best test acc",
            BestMetric::ValLoss => "best val loss",
        }
    }

    /// The value alone (`0.842`), or named where runs of both kinds are side by side
    /// (`acc 0.842`, `loss 1.234`).
    pub fn cell(self, named: bool) -> String {
        match named {
            false => format!("{:.3}", self.value),
            true => format!("{} {:.3}", self.metric.short(), self.value),
        }
    }
}

impl Baseline {
    /// The baseline of a run named `name` from its records.
    pub fn of(name: impl Into<String>, records: &[Record]) -> Baseline {
        let info =
            records
                .iter()
                .rev()
                .find_map(|r| if let Record::Start(i) = r { Some((**i).clone()) } else { None });
        let curves = Curves::of(records);
        Baseline { name: name.into(), best: Best::of_curves(&curves, info.as_ref()), curves, info }
    }
}

/// The settings a comparison shows, as (label, value of `info`): the model, then every leaf of
/// the settings tree, labelled by its key (with its section where the key alone is ambiguous).
fn settings(info: &RunInfo) -> Vec<(String, String)> {
    let leaves = crate::settings::flat(&serde_json::to_value(&info.settings).expect("settings serialize"));
    let key = |path: &str| path.rsplit('.').next().unwrap_or(path).to_owned();
    let ambiguous = |k: &str| leaves.keys().filter(|p| key(p) == k).count() > 1;
    let mut rows =
        vec![("model".to_owned(), info.model_label()), ("devices".to_owned(), device_list(&info.devices))];
    for (path, value) in &leaves {
        if path == "model.name" || path == "placement.devices" {
            continue;
        }
        let label = if ambiguous(&key(path)) { path.clone() } else { key(path) };
        let shown = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        rows.push((label, shown));
    }
    rows
}

/// The settings in which `runs` differ: one row per setting, one value per run (in order); a
/// run without a start record, or without the setting, shows `?`.
pub fn differing(runs: &[Option<&RunInfo>]) -> Vec<(String, Vec<String>)> {
    let columns: Vec<Vec<(String, String)>> =
        runs.iter().map(|r| r.map(settings).unwrap_or_default()).collect();
    let mut labels: Vec<&String> = Vec::new();
    for (label, _) in columns.iter().flatten() {
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    labels
        .into_iter()
        .filter_map(|label| {
            let values: Vec<String> = columns
                .iter()
                .map(|c| c.iter().find(|(l, _)| l == label).map_or("?".to_owned(), |(_, v)| v.clone()))
                .collect();
            values.windows(2).any(|w| w[0] != w[1]).then(|| (label.clone(), values))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::Settings;

    pub(crate) fn info(lr: f64, batch: usize, seed: u64) -> RunInfo {
        let mut settings = Settings::default();
        (settings.optimizer.lr, settings.recipe.batch_size, settings.recipe.seed) = (lr, batch, seed);
        RunInfo { devices: vec!["cpu".parse().unwrap(); 2], lr, settings, ..Default::default() }
    }

    #[test]
    fn only_the_settings_that_differ_are_shown() {
        let (a, b, c) = (info(0.2, 256, 0), info(0.1, 256, 0), info(0.2, 256, 1));
        let rows = differing(&[Some(&a), Some(&b), Some(&c)]);
        assert_eq!(
            rows,
            vec![
                ("lr".to_owned(), vec!["0.2".to_owned(), "0.1".to_owned(), "0.2".to_owned()]),
                ("seed".to_owned(), vec!["0".to_owned(), "0".to_owned(), "1".to_owned()]),
            ]
        );
        assert!(differing(&[Some(&a), Some(&a)]).is_empty());
        let rows = differing(&[Some(&a), None]);
        assert!(rows.iter().any(|(l, v)| *l == "model" && v[1] == "?"));
    }

    #[test]
    fn the_best_is_the_highest_accuracy_or_without_classes_the_lowest_val_loss() {
        use crate::record::EpochStats;
        let evaluations =
            [(1, 2.0, 0.5), (2, 1.2, 0.7), (3, 1.5, 0.6)].map(|(epoch, test_loss, test_acc)| {
                Record::Epoch(Box::new(EpochStats { epoch, test_loss, test_acc, ..Default::default() }))
            });
        let classifier = info(0.1, 32, 0);
        let language_model = RunInfo { task: crate::model::Task::Tokens, ..info(0.1, 32, 0) };
        let run = |start: RunInfo| {
            let mut r = vec![Record::Start(Box::new(start))];
            r.extend(evaluations.iter().cloned());
            r
        };
        let (acc, loss) = (BestMetric::ValAcc, BestMetric::ValLoss);
        assert_eq!(Best::of(&run(classifier.clone())), Some(Best { metric: acc, value: 0.7 }));
        assert_eq!(Best::of(&run(language_model.clone())), Some(Best { metric: loss, value: 1.2 }));
        assert_eq!(Best::of(&run(language_model)[..1]), None, "nothing evaluated yet");
        // A classifier that asked to be judged by its loss.
        let mut by_loss = classifier;
        by_loss.settings.best.metric = loss;
        assert_eq!(Best::of(&run(by_loss.clone())), Some(Best { metric: loss, value: 1.2 }));
        let curves = Curves::of(&run(by_loss.clone()));
        assert_eq!(Best::of_curves(&curves, Some(&by_loss)), Some(Best { metric: loss, value: 1.2 }));
        assert_eq!(Best { metric: loss, value: 1.2 }.label(), "best val loss");
        assert_eq!(
            (Best { metric: acc, value: 0.7 }.cell(false), Best { metric: loss, value: 1.2 }.cell(true)),
            ("0.700".into(), "loss 1.200".into())
        );
    }
}
