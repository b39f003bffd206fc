//! Runs side by side: a finished run's curves as a baseline under another's, and the settings
//! in which the runs differ (what a comparison is about).

use super::curves::Curves;
use super::{Record, RunInfo};
use crate::record::text::device_list;

/// A recorded run drawn under the current one.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The run directory's name, as the legend says it.
    pub name: String,
    pub curves: Curves,
    pub info: Option<RunInfo>,
    pub best_test_acc: Option<f64>,
}

impl Baseline {
    /// The baseline of a run named `name` from its records.
    pub fn of(name: impl Into<String>, records: &[Record]) -> Baseline {
        let info =
            records
                .iter()
                .rev()
                .find_map(|r| if let Record::Start(i) = r { Some((**i).clone()) } else { None });
        let best_test_acc = records
            .iter()
            .filter_map(|r| if let Record::Epoch(e) = r { Some(e.test_acc) } else { None })
            .fold(None, |best: Option<f64>, a| Some(best.map_or(a, |b| b.max(a))));
        Baseline { name: name.into(), curves: Curves::of(records), info, best_test_acc }
    }
}

/// The settings a comparison shows, as (label, value of `info`).
fn settings(info: &RunInfo) -> Vec<(&'static str, String)> {
    vec![
        ("model", info.model_label()),
        ("lr", info.lr.to_string()),
        ("batch", info.batch_size.to_string()),
        ("devices", device_list(&info.devices)),
        ("precision", info.precision.map_or("?".to_owned(), |p| p.name().to_owned())),
        ("seed", info.seed.map_or("?".to_owned(), |s| s.to_string())),
        ("optimizer", info.optim.map_or_else(|| "sgd".to_owned(), |o| o.kind.to_string())),
        ("momentum", info.momentum.to_string()),
        ("weight decay", info.weight_decay.to_string()),
        ("epochs", info.epochs.to_string()),
        ("data", info.data.clone().unwrap_or_else(|| "?".to_owned())),
    ]
}

/// The settings in which `runs` differ: one row per setting, one value per run (in order); a
/// run without a start record shows `?`.
pub fn differing(runs: &[Option<&RunInfo>]) -> Vec<(&'static str, Vec<String>)> {
    let columns: Vec<Vec<(&'static str, String)>> =
        runs.iter().map(|r| r.map(settings).unwrap_or_default()).collect();
    let Some(labels) =
        columns.iter().find(|c| !c.is_empty()).map(|c| c.iter().map(|(l, _)| *l).collect::<Vec<_>>())
    else {
        return Vec::new();
    };
    labels
        .into_iter()
        .enumerate()
        .filter_map(|(i, label)| {
            let values: Vec<String> =
                columns.iter().map(|c| c.get(i).map_or("?".to_owned(), |(_, v)| v.clone())).collect();
            values.windows(2).any(|w| w[0] != w[1]).then_some((label, values))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{ModelKind, Precision};

    pub(crate) fn info(lr: f64, batch: usize, seed: u64) -> RunInfo {
        RunInfo {
            model: ModelKind::Lenet,
            devices: vec!["cpu".parse().unwrap(); 2],
            param_count: 1,
            epochs: 10,
            steps_per_epoch: 1,
            batch_size: batch,
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
            optim: None,
            schedule: None,
            lr_scale: None,
            lr_batch_ref: None,
            clip_grad_norm: None,
            label_smoothing: None,
            accumulate: None,
            ema: None,
            train_samples: 1,
            test_samples: 1,
            val_samples: None,
            test_split: None,
            augment: None,
            cpu_threads_per_replica: 1,
            resumed_at: None,
            started_unix: None,
            allreduce: String::new(),
            timing: String::new(),
            model_file: None,
            seed: Some(seed),
            precision: Some(Precision::F32),
            loss_scale: None,
            restart: None,
            data: None,
            normalize: None,
            world: None,
        }
    }

    #[test]
    fn only_the_settings_that_differ_are_shown() {
        let (a, b, c) = (info(0.2, 256, 0), info(0.1, 256, 0), info(0.2, 256, 1));
        let rows = differing(&[Some(&a), Some(&b), Some(&c)]);
        assert_eq!(
            rows,
            vec![
                ("lr", vec!["0.2".to_owned(), "0.1".to_owned(), "0.2".to_owned()]),
                ("seed", vec!["0".to_owned(), "0".to_owned(), "1".to_owned()]),
            ]
        );
        assert!(differing(&[Some(&a), Some(&a)]).is_empty());
        let rows = differing(&[Some(&a), None]);
        assert!(rows.iter().any(|(l, v)| *l == "model" && v[1] == "?"));
    }
}
