//! Run configuration files: `--config FILE.toml` holds any of the training flags, by their long
//! names (`batch_size` or `batch-size`), and flags given on the command line override it; every
//! run directory gets the run's resolved settings as `config.toml`, so
//! `dpt-tui --config runs/X/config.toml` repeats that run. An unknown key is an error naming it.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

use clap::{ArgAction, CommandFactory};

use crate::cli::Args;
use dpt_tui::engine::optim::OptimizerKind;
use dpt_tui::engine::{OnNan, TrainConfig};

/// The file name of the resolved settings in a run directory.
pub const CONFIG_FILE: &str = "config.toml";

/// Flags a configuration file cannot hold.
const NOT_IN_FILES: [&str; 3] = ["config", "help", "version"];

/// `argv` with the flags of its `--config FILE` put before the command line's own (which clap
/// then lets override them); unchanged without `--config`.
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(path) = config_path(&argv) else { return Ok(argv) };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let flags = flags_of(&text).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(argv.len() + flags.len());
    let mut rest = argv.into_iter();
    out.extend(rest.next());
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(rest);
    Ok(out)
}

/// The value of `--config` in `argv`, if any.
fn config_path(argv: &[OsString]) -> Option<std::path::PathBuf> {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        if a == "--config" {
            return it.next().map(Into::into);
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    None
}

/// The command-line flags a configuration file's text stands for.
fn flags_of(text: &str) -> Result<Vec<String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_owned())?;
    let command = Args::command();
    let mut flags = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && !NOT_IN_FILES.contains(&long.as_str()))
            .ok_or_else(|| {
                format!(
                    "unknown key '{key}'; the keys are the training flags' long names, such as batch_size"
                )
            })?;
        let bool_flag = matches!(arg.get_action(), ArgAction::SetTrue);
        match value {
            toml::Value::Boolean(on) if bool_flag => {
                if *on {
                    flags.push(format!("--{long}"));
                }
            }
            _ if bool_flag => return Err(format!("'{key}' is a switch: give it true or false")),
            v => flags.push(format!("--{long}={}", scalar(key, v)?)),
        }
    }
    Ok(flags)
}

/// A value as the command line spells it (arrays as comma-separated lists).
fn scalar(key: &str, value: &toml::Value) -> Result<String, String> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => {
            items.iter().map(|v| scalar(key, v)).collect::<Result<Vec<_>, _>>()?.join(",")
        }
        _ => return Err(format!("'{key}' must be a string, a number, a boolean or a list")),
    })
}

/// A TOML string.
fn quoted(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The resolved settings of a run as a configuration file (its data and model paths
/// absolute): what `--config` reads back to repeat the run.
pub fn resolved(cfg: &TrainConfig) -> String {
    let mut lines: Vec<(&str, String)> = Vec::new();
    let mut add = |key: &'static str, value: String| lines.push((key, value));
    let model = match &cfg.script {
        Some(s) => dpt_tui::remote::runs::absolute(&s.path).display().to_string(),
        None => cfg.model.name().to_owned(),
    };
    add("model", quoted(&model));
    let d = &cfg.data;
    add("data", quoted(&dpt_tui::remote::runs::absolute(&d.path).display().to_string()));
    if let Some(f) = d.format {
        add("data_format", quoted(&f.to_string()));
    }
    if let Some((h, w)) = d.image_size {
        add("image_size", quoted(&format!("{h},{w}")));
    }
    let devices: Vec<String> = cfg.devices.iter().map(ToString::to_string).collect();
    add("devices", quoted(&devices.join(",")));
    add("epochs", cfg.epochs.to_string());
    add("batch_size", cfg.batch_size.to_string());
    let o = &cfg.optim;
    add("optimizer", quoted(o.kind.name()));
    add("lr", o.lr.to_string());
    if o.kind == OptimizerKind::Sgd {
        add("momentum", o.momentum.to_string());
        add("nesterov", o.nesterov.to_string());
    } else {
        add("betas", quoted(&format!("{},{}", o.betas.0, o.betas.1)));
        add("eps", o.eps.to_string());
        add("decay_all", o.decay_all.to_string());
    }
    add("weight_decay", o.weight_decay.to_string());
    let s = &cfg.schedule;
    add("lr_schedule", quoted(&s.shape.to_string()));
    add("warmup_steps", s.warmup_steps.to_string());
    add("min_lr", s.min_lr.to_string());
    add("lr_gamma", s.gamma.to_string());
    if let Some(r) = cfg.lr_batch_ref {
        add("lr_batch_ref", r.to_string());
    }
    if let Some(c) = cfg.clip_grad_norm {
        add("clip_grad_norm", c.to_string());
    }
    add("label_smoothing", cfg.label_smoothing.to_string());
    if cfg.augment.resized_crop.is_some() {
        // The preset holds the random-resized crop; the two flags below refine it.
        add("augment", quoted("imagenet"));
    }
    add("crop_padding", cfg.augment.crop_padding.unwrap_or(0).to_string());
    add("hflip", quoted(if cfg.augment.hflip { "on" } else { "off" }));
    add("accumulate", cfg.accumulate.to_string());
    if let Some(d) = cfg.ema {
        add("ema", d.to_string());
    }
    if cfg.keep_best > 0 {
        add("keep_best", cfg.keep_best.to_string());
    }
    if cfg.keep_best > 0 || cfg.early_stop.is_some() {
        add("best_metric", quoted(cfg.best_metric.name()));
    }
    if let Some(n) = cfg.early_stop {
        add("early_stop", n.to_string());
    }
    add("seed", cfg.seed.to_string());
    if let Some(n) = d.train_limit {
        add("train_limit", n.to_string());
    }
    if let Some(n) = d.test_limit {
        add("test_limit", n.to_string());
    }
    add("max_bad_images", d.max_bad.to_string());
    add("loader", quoted(&format!("{:?}", d.loader).to_lowercase()));
    add("data_memory", d.memory.to_string());
    add("prefetch", cfg.loader.prefetch.to_string());
    add("decode_threads", cfg.loader.decode_threads.to_string());
    if let Some(f) = d.val_fraction {
        add("val_fraction", f.to_string());
    }
    add("log_every", cfg.log_every.to_string());
    if let Some(n) = cfg.max_steps {
        add("max_steps", n.to_string());
    }
    add("checkpoint_every", quoted(&cfg.checkpoint_every.to_string()));
    add("keep_checkpoints", cfg.keep_checkpoints.to_string());
    add("precision", quoted(cfg.precision.name()));
    match cfg.loss_scale {
        Some(l) => {
            add("loss_scale", quoted("on"));
            add("loss_scale_init", l.init.to_string());
            add("loss_scale_interval", l.growth_interval.to_string());
        }
        None => add("loss_scale", quoted("off")),
    }
    add("bucket_cap_mb", cfg.bucket_cap_mb.to_string());
    if let Some(on) = cfg.channels_last {
        add("channels_last", quoted(if on { "on" } else { "off" }));
    }
    if cfg.script.is_some() {
        let loss = match cfg.loss {
            dpt_tui::model::LossKind::CrossEntropy => "cross-entropy",
            dpt_tui::model::LossKind::Nll => "nll",
        };
        add("loss", quoted(loss));
    }
    let n = &cfg.normalization;
    let values: Vec<String> = n.mean.iter().chain(&n.std).map(ToString::to_string).collect();
    add("normalize", quoted(&values.join(",")));
    add(
        "on_nan",
        quoted(match cfg.on_nan {
            OnNan::Pause => "pause",
            OnNan::Stop => "stop",
            OnNan::Ignore => "ignore",
        }),
    );
    add("step_timeout", cfg.step_timeout.as_secs_f64().to_string());
    add("cpu_threads", cfg.cpu_threads.to_string());
    let mut text = String::from(
        "# The settings this run trained with; `dpt-tui --config THIS_FILE` repeats it (flags given\n# beside it override them).\n",
    );
    for (k, v) in lines {
        let _ = writeln!(text, "{k} = {v}");
    }
    text
}

/// Writes the run's resolved settings into its directory, atomically.
pub fn write(dir: &Path, cfg: &TrainConfig) -> std::io::Result<()> {
    dpt_tui::atomic::write_bytes(&dir.join(CONFIG_FILE), resolved(cfg).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_flags_and_unknown_keys_are_named() {
        let flags = flags_of("batch_size = 64\nlr-schedule = \"cosine\"\nnesterov = true\ndecay_all = false\nbetas = [0.9, 0.95]\n").expect("test set-up");
        assert_eq!(flags, ["--batch-size=64", "--betas=0.9,0.95", "--lr-schedule=cosine", "--nesterov"]);
        let e = flags_of("batchsize = 64").expect_err("refused");
        assert!(e.contains("unknown key 'batchsize'"), "{e}");
        assert!(flags_of("nesterov = 3").expect_err("refused").contains("switch"));
        assert!(flags_of("config = \"x.toml\"").expect_err("refused").contains("unknown key 'config'"));
        assert!(flags_of("lr = ").is_err(), "malformed TOML");
    }

    #[test]
    fn the_command_line_comes_after_the_file_so_it_wins() {
        let dir = tempfile::tempdir().expect("test set-up");
        let file = dir.path().join("run.toml");
        std::fs::write(&file, "epochs = 3\nlr = 0.5\n").expect("test set-up");
        let argv: Vec<OsString> = ["dpt-tui", "--config", file.to_str().expect("test set-up"), "--lr", "0.1"]
            .iter()
            .map(OsString::from)
            .collect();
        let args = <crate::cli::Args as clap::Parser>::try_parse_from(expand(argv).expect("test set-up"))
            .expect("test set-up");
        assert_eq!((args.epochs, args.lr), (Some(3), Some(0.1)));
    }
}
