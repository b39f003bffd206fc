//! Starting or continuing a run with the same command, as Slurm's requeue and torchrun's
//! `--max-restarts` run a job again. The rule: `--run-dir D` without `--resume`, where `D` holds
//! a checkpoint, continues that run from it, provided the command's settings agree with the
//! run's own (its checkpoint's); otherwise it is refused with each differing setting named. An
//! absent or empty `D` starts the run. In a multi-process run rank 0 looks at `D` and every
//! rank follows its decision.

use std::borrow::Cow;
use std::path::Path;

use anyhow::anyhow;

use super::input;
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dist::World;
use dpt_tui::persist::checkpoint::{checkpoint_path, CheckpointState};
use dpt_tui::record::run_info::Restart;
use dpt_tui::settings::{differences, Settings};

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

/// Refuses a continuation whose settings (`command`'s) differ from those the run in `dir`
/// recorded in its checkpoint, naming each difference; placement, checkpoint cadence and a
/// longer run may differ (`dpt_tui::settings::differences`). Values the run derived, such as a
/// measured normalization, are the run's and not compared.
pub fn check_same_settings(dir: &Path, run: &CheckpointState, command: &Settings) -> Result<(), Failure> {
    let recorded = if run.legacy {
        // An earlier version's run: its settings are its config.toml's (its checkpoint lists
        // only some).
        let path = dir.join(super::config_file::CONFIG_FILE);
        let earlier = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| super::config_file::earlier_settings(&t));
        match earlier {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "dpt-tui: note: {} was started by an earlier version and its settings cannot be read back ({e}); continuing it without comparing them",
                    dir.display()
                );
                return Ok(());
            }
        }
    } else {
        run.settings.clone()
    };
    let differences = differences(&recorded, command);
    if differences.is_empty() {
        return Ok(());
    }
    Err(input(anyhow!(
        "{} holds a run with other settings ({}); give the same settings to continue it, --resume it to change them on purpose, or choose another --run-dir",
        dir.display(),
        differences.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
