//! The record folded into lines of text: the headless output and the dashboard's log say the
//! same thing in the same words.

use serde::{Deserialize, Serialize};

use super::{Change, Record, RunInfo, StepStats, Summary};
use crate::device::DeviceId;
use crate::flops::{mfu_label, rate_label};

/// How a line is coloured, and how much it matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// One line of text for a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub level: Level,
    pub text: String,
    /// A per-window progress line: printed headless, left out of the dashboard's log (its
    /// status line and curves show the same).
    pub progress: bool,
}

/// `129068` → `129,068`.
pub fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A learning rate as people write it: 4 significant digits, no trailing zeros (`0.001`,
/// `0.0009999`, `3e-6`), the exponent form below 1e-4.
pub fn lr_text(lr: f64) -> String {
    if lr == 0.0 || !lr.is_finite() {
        return format!("{lr}");
    }
    if (1e-4..1e4).contains(&lr.abs()) {
        let decimals = (3 - lr.abs().log10().floor() as i32).max(0) as usize;
        let s = format!("{lr:.decimals$}");
        let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
        return s.to_owned();
    }
    let s = format!("{lr:.3e}");
    let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
    let mantissa =
        if mantissa.contains('.') { mantissa.trim_end_matches('0').trim_end_matches('.') } else { mantissa };
    format!("{mantissa}e{exponent}")
}

fn ms(seconds: f64) -> String {
    format!("{:.1}", seconds * 1e3)
}

/// `[cuda:0, cuda:1]`.
pub fn device_list<T: std::fmt::Display>(items: &[T]) -> String {
    let names: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", names.join(", "))
}

/// Turns records into lines; remembers the planned epochs for "epoch 3/10".
#[derive(Debug, Clone, Default)]
pub struct Narrator {
    epochs: usize,
    /// The run's length in steps and the steps between evaluations, for a run measured in
    /// steps (token data).
    steps: Option<(usize, usize)>,
    /// Tokens per sample (token data's block), for tokens/s.
    block: Option<usize>,
    /// Whether the run counts correct predictions (else it reports the loss alone).
    classes: bool,
    /// Whether each epoch evaluates a validation split (else the test set).
    val: bool,
    /// The cause of the last verdict said: a window's verdict is said when its cause changes.
    cause: Option<super::bottleneck::Cause>,
    /// A script run: its steps in all, if it said (its lines count steps and say only what it
    /// reported).
    script: Option<Option<usize>>,
}

impl Narrator {
    /// The line for `record`, or `None` for records that say nothing new.
    pub fn line(&mut self, record: &Record) -> Option<Line> {
        let info = |text: String| Some(Line { level: Level::Info, text, progress: false });
        match record {
            Record::Start(i) => {
                self.epochs = i.epochs();
                let r = &i.settings.recipe;
                self.steps = r.steps.map(|n| (n, r.eval_periods(n).0));
                self.block = i.settings.data.block_size;
                self.classes = i.task.has_classes();
                self.val = i.val_samples.is_some() || i.test_split.as_deref() == Some("val");
                self.script = i.script.as_ref().map(|s| s.total_steps);
                match &i.script {
                    Some(script) => info(script_run::script_start_line(i, script)),
                    None => info(start_line(i)),
                }
            }
            Record::Step(s) if self.script.is_some() => Some(Line {
                level: Level::Info,
                progress: true,
                text: script_run::script_step_line(s, self.script.flatten(), self.classes),
            }),
            Record::Eval(e) => info(format!(
                "step {} evaluation: {}",
                e.global_step,
                e.metrics.iter().map(|(k, v)| format!("{k} {}", script_run::figure(*v))).collect::<Vec<_>>().join(", ")
            )),
            Record::Step(s) => Some(Line {
                level: Level::Info,
                progress: true,
                text: format!(
                    "{}  loss {:.4}{}  lr {}  {:.1} samples/s{}{}  {}",
                    match self.steps {
                        Some((n, _)) => format!("step {:>5}/{n}", s.global_step),
                        None => format!("epoch {}/{} step {:>4}/{}", s.epoch, self.epochs, s.step, s.steps_per_epoch),
                    },
                    s.loss,
                    if self.classes { format!("  acc {:.3}", s.acc) } else { String::new() },
                    lr_text(s.lr),
                    s.samples_per_sec,
                    self.block.map_or(String::new(), |t| format!("  {:.0} tokens/s", s.samples_per_sec * t as f64)),
                    s.model_flops.map_or(String::new(), |f| format!("  {}", mfu_label(f, s.mfu))),
                    if s.timed_steps == Some(0) {
                        "step not timed (warm-up)".to_owned()
                    } else {
                        format!(
                            "step {} ms = data {} + fwd/bwd {} + allreduce {} + update {}",
                            ms(s.timing.total()),
                            ms(s.timing.data),
                            ms(s.timing.compute),
                            ms(s.timing.allreduce),
                            ms(s.timing.update),
                        )
                    },
                ) + &s.grad_norm.map_or(String::new(), |g| format!("  grad norm {g:.3}"))
                    + &if s.loss_scale.is_some() { format!("  loss scale {}", loss_scale(s)) } else { String::new() }
                    + &s.loader.map_or(String::new(), |l| format!("  loader {}", loader(&l)))
                    + &s.overlapped.map_or(String::new(), |o| format!("  overlap {:.0}%", o * 100.0))
                    + &s.cuda_syncs.map_or(String::new(), |n| format!("  CUDA syncs/step {n:.1}"))
                    + &match &s.bottleneck {
                        Some(b) if self.cause != Some(b.cause) => {
                            self.cause = Some(b.cause);
                            format!("\nbottleneck: {}", b.line())
                        }
                        _ => String::new(),
                    },
            }),
            Record::Epoch(e) if !self.classes => info(format!(
                "{} done: train loss {:.4}, {set} loss {:.4}{}, {:.1} sec (+{:.1} eval), {:.1} samples/sec",
                match self.steps {
                    Some((n, every)) => format!("step {}/{n}", (e.epoch * every).min(n)),
                    None => format!("epoch {}/{}", e.epoch, self.epochs),
                },
                e.train_loss, e.test_loss,
                match self.block {
                    Some(_) => format!(", {set} perplexity {:.2}", e.test_loss.exp(), set = if self.val { "val" } else { "test" }),
                    None => String::new(),
                },
                e.epoch_seconds, e.eval_seconds, e.samples_per_sec,
                set = if self.val { "val" } else { "test" }
            )),
            Record::Epoch(e) => info(format!(
                "epoch {}/{} done: train loss {:.4}, train acc {:.3}, {set} loss {:.4}, {set} acc {:.3}{}, {:.1} sec (+{:.1} eval), {:.1} samples/sec",
                e.epoch, self.epochs, e.train_loss, e.train_acc, e.test_loss, e.test_acc,
                e.top5_acc.map_or(String::new(), |a| format!(", top-5 {a:.3}"))
                    + &e.ema_test_acc.map_or(String::new(), |a| format!(" (EMA {a:.3})")),
                e.epoch_seconds, e.eval_seconds, e.samples_per_sec,
                set = if self.val { "val" } else { "test" }
            )),
            // A rewind point is listed by the `r` key, not in the log (one every few hundred steps).
            Record::Event(Change::Snapshot { .. }) => None,
            Record::Event(c) => Some(events::change_line(c)),
            Record::Summary(s) if self.script.is_some() => info(format!(
                "{} steps ({}){}\nspeed: {:.1} samples/sec",
                s.global_steps,
                match s.reason {
                    super::FinishReason::Stopped => "stopped",
                    _ => "completed",
                },
                s.test_acc.map_or(String::new(), |a| format!(", last evaluated accuracy {a:.3}")),
                s.samples_per_sec
            )),
            Record::Summary(s) if !self.classes => info(format!(
                "{} steps on {}\nspeed: {:.1} samples/sec{}{}",
                s.global_steps,
                device_list(&s.devices),
                s.samples_per_sec,
                summary_figures(s),
                summary_verdict(s)
            )),
            Record::Summary(s) => {
                let acc = s.test_acc.map_or("n/a".to_owned(), |a| format!("{a:.3}"));
                let spe = s.sec_per_epoch.map_or("n/a".to_owned(), |t| format!("{t:.1}"));
                info(format!(
                    "test acc: {acc}, {spe} sec/epoch on {}\nspeed: {:.1} samples/sec{}{}",
                    device_list(&s.devices),
                    s.samples_per_sec,
                    summary_figures(s),
                    summary_verdict(s)
                ))
            }
        }
    }
}

/// The summary's lines under its speed, each where the record has it: the model FLOP/s with
/// the utilisation of the devices' peak, and the peak memory of the host and of each GPU. The
/// speed line itself stays `speed: … samples/sec`, which scripts read.
fn summary_figures(s: &Summary) -> String {
    let mut lines = String::new();
    if let Some(f) = s.model_flops {
        lines += &format!("\nmodel FLOPs: {}", rate_label(f));
        match (s.mfu, &s.peak_flops) {
            (Some(u), Some(p)) => {
                lines += &format!(", MFU {:.0}% of the {} ({})", u * 100.0, p.basis, rate_label(p.flops))
            }
            (Some(u), None) => lines += &format!(", MFU {:.0}%", u * 100.0),
            (None, _) => {}
        }
    }
    if let Some(m) = s.peak_rss_mib {
        lines += &format!("\npeak host memory: {m:.0} MiB");
    }
    let mib = |m: &f64| thousands(m.round() as i64);
    match s.peak_device_mib.as_slice() {
        [] => {}
        [one] => lines += &format!("\npeak GPU memory: {} MiB", mib(one)),
        each => {
            let each: Vec<String> = each.iter().map(mib).collect();
            lines += &format!("\npeak GPU memory: {} MiB (per GPU)", each.join(" / "));
        }
    }
    lines
}

/// The run's verdict as the summary's last line (`bottleneck: input-bound: …`).
fn summary_verdict(s: &Summary) -> String {
    s.bottleneck.as_ref().map_or(String::new(), |b| format!("\nbottleneck: {}", b.line()))
}

/// The streaming loader's figures in words: `1.8/2 ready, 3250 img/s` (`waiting` when the
/// replicas found less than half a batch ready on average).
pub fn loader(l: &super::LoaderStats) -> String {
    let waiting = if l.ready < 0.5 { " (replicas wait for data)" } else { "" };
    format!("{:.1}/{} ready, {:.0} img/s decoding{waiting}", l.ready, l.depth, l.images_per_sec)
}

fn start_line(info: &RunInfo) -> String {
    let restart = info.restart.as_ref().map_or(String::new(), |r| {
        let by = match r.count {
            Some(n) => format!("{} restart {n}", r.by),
            None => r.by.clone(),
        };
        format!("continuing the run ({by}) from step {}: ", info.resumed_at.unwrap_or(0))
    });
    let world = info.world.as_ref().map_or(String::new(), |w| {
        format!(
            "rank {} of {} ({}, {} replicas in all over {}); ",
            w.rank,
            w.hosts.len(),
            w.backend,
            w.replicas.iter().sum::<usize>(),
            w.hosts.join(", ")
        )
    });
    let r = &info.settings.recipe;
    let length = match r.steps {
        Some(n) => format!(
            "{n} steps (an evaluation every {}), batch {} windows of {} tokens",
            r.eval_periods(n).0,
            r.batch_size,
            info.settings.data.block_size.unwrap_or(0)
        ),
        None => format!("{} epochs x {} steps, batch {}", info.epochs(), info.steps_per_epoch, r.batch_size),
    };
    let samples = match r.steps {
        Some(_) => format!("{} val windows", info.test_samples),
        None => format!(
            "{} train / {}{} test samples",
            info.train_samples,
            info.val_samples.map_or(String::new(), |v| format!("{v} val / ")),
            info.test_samples
        ),
    };
    format!(
        "{restart}{world}training {} ({} parameters) on {} ({} replica(s), {} CPU thread(s) each), {length}, {}, {}, {samples}",
        info.settings.model.name.file().map_or_else(|| info.model.name().to_owned(), |f| format!("{} (TorchScript)", f.display())),
        thousands(info.param_count),
        device_list(&info.devices),
        info.devices.len(),
        info.cpu_threads_per_replica,
        info.lr_label(),
        info.optimizer_label(),
    ) + &if info.allreduce.is_empty() { String::new() } else { format!(", allreduce: {}", info.allreduce) }
        + &if info.timing.is_empty() { String::new() } else { format!(", step timing: {}", info.timing) }
        + &info.memory.map_or(String::new(), |m| {
            let shard = match (m.optimizer_shards, m.gradient_shards) {
                (0 | 1, _) => String::new(),
                (n, 0 | 1) => format!(" (--zero 1: a 1/{n} shard)"),
                (n, _) => format!(" (--zero 2: 1/{n} shards of both)"),
            };
            let buckets = match m.bucket_buffers {
                0 => String::new(),
                b => format!(", bucket buffers up to {}", size(b)),
            };
            let points = info.snapshot_bytes.map_or(String::new(), |b| format!(", rewind points {}", size(b)))
                + &info.checkpoint_bytes.map_or(String::new(), |b| format!(", checkpoint copy {}", size(b)));
            format!(
                ", memory per replica: weights {}, gradients {}, optimizer state {}{shard}{buckets}{points}",
                size(m.weights),
                size(m.gradients),
                size(m.optimizer)
            )
        })
        + &if info.math.is_empty() { String::new() } else { format!(", math: {}", info.math) }
        + &graphs(info)
        + &info.data.as_ref().map_or(String::new(), |d| format!("; data: {d}"))
        + &info.augment.as_ref().map_or(String::new(), |a| format!(", augmented: {a}"))
        + &info.normalize.as_ref().filter(|_| r.steps.is_none()).map_or(String::new(), |n| {
            format!(", normalized (x - {:?}) / {:?}", n.mean, n.std)
        })
}

/// Whether the replicas graph their steps, said for runs with a GPU or graphed ones
/// (`, steps graphed: …`, `, steps eager: --zero 2 …`).
fn graphs(info: &RunInfo) -> String {
    let gpu = info.devices.iter().any(|d| matches!(d, DeviceId::Cuda(_)));
    match info.cuda_graphs.as_str() {
        "" => String::new(),
        said if gpu || said.starts_with("graphed") => format!(", steps {said}"),
        _ => String::new(),
    }
}

/// A window's loss scale, with the steps it skipped (`1024, 1 step skipped`).
pub fn loss_scale(s: &StepStats) -> String {
    let scale = s.loss_scale.map_or_else(|| "-".to_owned(), |v| v.to_string());
    match s.skipped_steps.unwrap_or(0) {
        0 => scale,
        1 => format!("{scale}, 1 step skipped"),
        n => format!("{scale}, {n} steps skipped"),
    }
}

mod events;
mod script_run;
#[cfg(test)]
pub(crate) mod tests;

/// Bytes in MiB, or in GiB from 1 GiB on (`190.3 MiB`, `2.1 GiB`).
fn size(bytes: u64) -> String {
    let mib = bytes as f64 / f64::from(1u32 << 20);
    if mib < 1024.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{:.1} GiB", mib / 1024.0)
    }
}
