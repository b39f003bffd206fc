//! Starting or continuing a run with the same command, as Slurm's requeue and torchrun's
//! `--max-restarts` run a job again. The rule: `--run-dir D` without `--resume`, where `D` holds
//! a checkpoint, continues that run from it, provided the command's settings agree with the
//! run's own (`D/config.toml`); otherwise it is refused with each differing setting named. An
//! absent or empty `D` starts the run. In a multi-process run rank 0 looks at `D` and every
//! rank follows its decision.

use std::borrow::Cow;
use std::path::Path;

use anyhow::anyhow;

use super::config_file::CONFIG_FILE;
use super::input;
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dist::World;
use dpt_tui::engine::checkpoint::checkpoint_path;
use dpt_tui::record::stats::Restart;

/// Settings that may differ between the attempts of one run: where and how long it runs, how
/// often it reports and saves, not what it computes. (A larger `--epochs` trains further, as
/// with `--resume`.)
const MAY_DIFFER: [&str; 15] = [
    "loader",
    "data_memory",
    "prefetch",
    "decode_threads",
    "keep_checkpoints",
    "devices",
    "epochs",
    "log_every",
    "max_steps",
    "checkpoint_every",
    "on_nan",
    "step_timeout",
    "cpu_threads",
    "channels_last",
    "bucket_cap_mb",
];

/// `args`, turned into a continuation of the run in `--run-dir` when that folder holds one.
/// Every rank of a multi-process run calls this (they agree on `--resume` already); rank 0,
/// which owns the run directory, decides for all.
pub fn resolve<'a>(args: &'a Args, world: Option<&World>) -> Result<Cow<'a, Args>, Failure> {
    if args.resume.is_some() {
        return Ok(Cow::Borrowed(args));
    }
    let leader = world.is_none_or(|w| w.rank == 0);
    let here = args.run_dir.as_ref().filter(|d| leader && checkpoint_path(d).is_file());
    let dir = match world {
        Some(w) => {
            let bytes = here.map(|d| d.as_os_str().as_encoded_bytes().to_vec()).unwrap_or_default();
            let shared = w.share_bytes("continue", Some(&bytes)).map_err(super::dist::failure)?;
            // Only rank 0 reads the checkpoint; the others name its folder in messages.
            (!shared.is_empty())
                .then(|| std::path::PathBuf::from(String::from_utf8_lossy(&shared).into_owned()))
        }
        None => here.cloned(),
    };
    let Some(dir) = dir else { return Ok(Cow::Borrowed(args)) };
    Ok(Cow::Owned(Args { resume: Some(dir), run_dir: None, continuing: true, ..args.clone() }))
}

/// Who ran this command again: torchrun's restart count, Slurm's requeue count, or neither
/// (the user, or a job script).
pub fn restart_by(env: impl Fn(&str) -> Option<String>) -> Restart {
    let count = |key: &str| env(key).and_then(|v| v.trim().parse::<u64>().ok()).filter(|n| *n > 0);
    if let Some(n) = count("TORCHELASTIC_RESTART_COUNT") {
        return Restart { by: "torchrun".into(), count: Some(n) };
    }
    if let Some(n) = count("SLURM_RESTART_COUNT") {
        return Restart { by: "slurm".into(), count: Some(n) };
    }
    Restart { by: "the same command".into(), count: None }
}

/// Refuses a continuation whose settings (`resolved`, the command's, as a configuration file)
/// differ from those the run in `dir` recorded, naming each difference.
pub fn check_same_settings(dir: &Path, resolved: &str) -> Result<(), Failure> {
    let path = dir.join(CONFIG_FILE);
    let Ok(recorded) = std::fs::read_to_string(&path) else {
        // A run of a version without configuration files: nothing to compare with.
        return Ok(());
    };
    let parse = |text: &str| text.parse::<toml::Table>();
    let (Ok(theirs), Ok(ours)) = (parse(&recorded), parse(resolved)) else {
        return Err(input(anyhow!("{} is not a configuration file dpt-tui can read", path.display())));
    };
    let differences = differences(&theirs, &ours);
    if differences.is_empty() {
        return Ok(());
    }
    Err(input(anyhow!(
        "{} holds a run with other settings ({}); give the same settings to continue it, --resume it to change them on purpose, or choose another --run-dir",
        dir.display(),
        differences.join("; ")
    )))
}

/// `key: the run's value, this command's value` for each setting that differs.
fn differences(run: &toml::Table, command: &toml::Table) -> Vec<String> {
    let mut keys: Vec<&String> = run.keys().chain(command.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !MAY_DIFFER.contains(&k.as_str()))
        .filter(|k| run.get(*k) != command.get(*k))
        .map(|k| format!("{k} = {} in the run, {} in this command", shown(run.get(k)), shown(command.get(k))))
        .collect()
}

/// A setting's value as the file writes it.
fn shown(v: Option<&toml::Value>) -> String {
    match v {
        None => "unset".to_owned(),
        Some(toml::Value::String(s)) => format!("\"{s}\""),
        Some(toml::Value::Integer(i)) => i.to_string(),
        Some(toml::Value::Float(f)) => f.to_string(),
        Some(toml::Value::Boolean(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_settings_are_named_and_placement_may_change() {
        let run: toml::Table =
            "lr = 0.1\nseed = 1\ndevices = \"cpu,cpu\"\nepochs = 3\n".parse().expect("test set-up");
        let same: toml::Table =
            "lr = 0.1\nseed = 1\ndevices = \"cpu\"\nepochs = 5\n".parse().expect("test set-up");
        assert!(differences(&run, &same).is_empty());
        let other: toml::Table = "lr = 0.2\nseed = 1\nema = 0.9\n".parse().expect("test set-up");
        assert_eq!(
            differences(&run, &other),
            ["ema = unset in the run, 0.9 in this command", "lr = 0.1 in the run, 0.2 in this command"]
        );
    }

    #[test]
    fn a_restart_is_attributed_to_its_launcher() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(restart_by(env(&[("TORCHELASTIC_RESTART_COUNT", "2")])).count, Some(2));
        assert_eq!(
            restart_by(env(&[("TORCHELASTIC_RESTART_COUNT", "0"), ("SLURM_RESTART_COUNT", "1")])).by,
            "slurm"
        );
        assert_eq!(restart_by(env(&[("TORCHELASTIC_RESTART_COUNT", "0")])).by, "the same command");
    }
}
