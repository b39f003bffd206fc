//! What the event files hold, taken from the records as they are written: per report window
//! the training figures, the step split and every device's latest reading; per evaluation the
//! evaluated split's figures; at each start the resolved settings as hyperparameters.

use std::collections::BTreeMap;

use super::HParam;
use crate::monitor::DeviceSample;
use crate::record::{Record, RunInfo};

/// The record's state the scalars need: what the run reports, and the step evaluations
/// belong to (the last report window's: each epoch's end reports one before it evaluates).
#[derive(Debug, Clone, Default)]
pub struct Scalars {
    classes: bool,
    /// Tokens per sample (token data), for tokens/s and perplexity.
    block: Option<usize>,
    /// `val` or `test`: what the evaluations evaluate.
    split: &'static str,
    step: usize,
}

/// Tag and value pairs of one step.
pub type Values = Vec<(String, f32)>;

impl Scalars {
    /// The scalars `record` adds and their step; `devices` are every device's latest readings,
    /// written with each report window.
    pub fn of(&mut self, record: &Record, devices: &[DeviceSample]) -> Option<(i64, Values)> {
        let mut v = Values::new();
        // An absent or non-finite figure is left out.
        let mut put = |tag: &str, value: Option<f64>| {
            if let Some(x) = value.filter(|x| x.is_finite()) {
                v.push((tag.to_owned(), x as f32));
            }
        };
        match record {
            Record::Start(info) => {
                self.classes = info.task.has_classes();
                self.block = info.settings.data.block_size.filter(|_| info.has_perplexity());
                self.split = split_of(info);
                return None;
            }
            Record::Step(s) => {
                self.step = s.global_step;
                put("train/loss", Some(s.loss));
                if self.classes {
                    put("train/accuracy", Some(s.acc));
                }
                put("lr", Some(s.lr));
                put("samples_per_sec", Some(s.samples_per_sec));
                if let Some(t) = self.block {
                    put("tokens_per_sec", Some(s.samples_per_sec * t as f64));
                }
                put("grad_norm", s.grad_norm);
                for (name, value) in &s.scalars {
                    put(&format!("scalars/{name}"), Some(*value));
                }
                put("loss_scale", s.loss_scale);
                if s.timed_steps != Some(0) {
                    put("step/data_ms", Some(s.timing.data * 1e3));
                    put("step/forward_backward_ms", Some(s.timing.compute * 1e3));
                    put("step/allreduce_ms", Some(s.timing.allreduce * 1e3));
                    put("step/update_ms", Some(s.timing.update * 1e3));
                }
                for d in devices {
                    let name = match d.rank {
                        Some(r) => format!("device/rank{r}/{}", d.device),
                        None => format!("device/{}", d.device),
                    };
                    put(&format!("{name}/utilization"), d.util_pct);
                    put(&format!("{name}/memory_gib"), d.mem_used.map(|m| m as f64 / (1u64 << 30) as f64));
                }
            }
            Record::Epoch(e) => {
                let split = self.split;
                put(&format!("{split}/loss"), Some(e.test_loss));
                if self.classes {
                    put(&format!("{split}/accuracy"), Some(e.test_acc));
                    put(&format!("{split}/top5_accuracy"), e.top5_acc);
                    put(&format!("{split}/ema_accuracy"), e.ema_test_acc);
                }
                if self.block.is_some() {
                    put(&format!("{split}/perplexity"), Some(e.test_loss.exp()));
                }
                put("train/epoch_loss", Some(e.train_loss));
            }
            Record::Eval(e) => {
                self.step = e.global_step;
                for (name, value) in &e.metrics {
                    put(&format!("eval/{name}"), Some(*value));
                }
            }
            Record::Event(_) | Record::Summary(_) => return None,
        }
        Some((self.step as i64, v))
    }
}

/// The split a run evaluates on, as its tags name it.
fn split_of(info: &RunInfo) -> &'static str {
    let val = info.val_samples.is_some() || info.test_split.as_deref() == Some("val");
    if val {
        "val"
    } else {
        "test"
    }
}

/// The tags of the figures a run writes after each epoch's evaluation (as [`Scalars::of`]
/// writes them), the ones that rank runs first: accuracy (with classes), loss, perplexity (a
/// language model), then the training loss.
pub fn epoch_metric_tags(info: &RunInfo) -> Vec<String> {
    let split = split_of(info);
    let mut tags = Vec::new();
    if info.task.has_classes() {
        tags.push(format!("{split}/accuracy"));
    }
    tags.push(format!("{split}/loss"));
    if info.settings.data.block_size.is_some() && info.has_perplexity() {
        tags.push(format!("{split}/perplexity"));
    }
    tags.push("train/epoch_loss".to_owned());
    tags
}

/// The run's resolved settings as hyperparameters (`optimizer.lr`, `recipe.batch_size`, …),
/// with the model and the devices.
pub fn hparams(info: &RunInfo) -> BTreeMap<String, HParam> {
    let settings = serde_json::to_value(&info.settings).expect("settings serialize");
    let mut out: BTreeMap<String, HParam> = crate::settings::flat(&settings)
        .into_iter()
        .map(|(k, v)| {
            let value = match v {
                serde_json::Value::Bool(b) => HParam::Bool(b),
                serde_json::Value::Number(n) => HParam::Number(n.as_f64().unwrap_or(f64::NAN)),
                serde_json::Value::String(s) => HParam::Text(s),
                other => HParam::Text(other.to_string()),
            };
            (k, value)
        })
        .collect();
    out.insert("model".into(), HParam::Text(info.model_label()));
    out.insert("devices".into(), HParam::Text(crate::record::text::device_list(&info.devices)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{EpochStats, StepStats};

    #[test]
    fn a_language_model_gets_tokens_per_second_and_val_perplexity_without_accuracy() {
        let mut info =
            RunInfo { task: crate::model::Task::Tokens, val_samples: Some(10), ..RunInfo::default() };
        info.settings.data.block_size = Some(64);
        let mut s = Scalars::default();
        assert_eq!(s.of(&Record::Start(Box::new(info)), &[]), None);
        let step = StepStats {
            global_step: 40,
            loss: 2.0,
            samples_per_sec: 10.0,
            timed_steps: Some(0),
            ..StepStats::default()
        };
        let (at, v) = s.of(&Record::Step(Box::new(step)), &[]).unwrap();
        let tags: Vec<&str> = v.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            (at, tags),
            (40, vec!["train/loss", "lr", "samples_per_sec", "tokens_per_sec"]),
            "no split for warm-up"
        );
        assert_eq!(v[3].1, 640.0);
        let epoch = EpochStats { test_loss: 2.0, train_loss: 2.5, ..EpochStats::default() };
        let (at, v) = s.of(&Record::Epoch(Box::new(epoch)), &[]).unwrap();
        assert_eq!(at, 40, "an evaluation belongs to the step before it");
        assert_eq!(
            v,
            vec![
                ("val/loss".into(), 2.0),
                ("val/perplexity".into(), 2.0f64.exp() as f32),
                ("train/epoch_loss".into(), 2.5)
            ]
        );
    }
}
