//! Run configuration files: `--config FILE.toml` holds tables of the settings tree (read by
//! `dpt_tui::settings::Layers`) and, at its top level, any of the flags by their long names
//! (`batch_size` or `batch-size`), read here as if given before the command line's own; flags
//! given on the command line override both. Every run directory gets the run's resolved
//! settings tree as `config.toml`, so `dpt-tui --config runs/X/config.toml` repeats that run.
//! An unknown key is an error naming it.

use std::ffi::OsString;

use clap::{ArgAction, CommandFactory};

use crate::cli::Args;

/// The file name of the resolved settings in a run directory.
#[cfg(feature = "train")]
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

/// The settings an earlier version's `config.toml` (flags by their long names, the resolved
/// values) stands for, less its `normalize`: earlier versions wrote the measured normalization
/// there, a value of the run and not a setting.
#[cfg(feature = "train")]
pub fn earlier_settings(text: &str) -> Result<dpt_tui::settings::Settings, String> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_owned())?;
    table.remove("normalize");
    let argv = std::iter::once("dpt-tui".to_owned()).chain(flags_of_table(&table)?);
    let matches = crate::cli::command().try_get_matches_from(argv).map_err(|e| e.to_string())?;
    let args = <Args as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    let flags = args.settings.layer().map_err(|e| e.to_string())?;
    dpt_tui::settings::Layers { flags: Some(flags), ..Default::default() }
        .resolve()
        .map_err(|e| e.to_string())
}

/// The command-line flags a configuration file's text stands for.
fn flags_of(text: &str) -> Result<Vec<String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_owned())?;
    flags_of_table(&table)
}

/// The command-line flags a configuration file's top-level keys stand for.
fn flags_of_table(table: &toml::Table) -> Result<Vec<String>, String> {
    let command = Args::command();
    let mut flags = Vec::new();
    // Tables are parts of the settings tree, read as a layer of their own.
    for (key, value) in table.iter().filter(|(_, v)| !v.is_table()) {
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

/// Writes the run's resolved settings into its directory, atomically: the settings tree as
/// TOML, which `--config` reads back to repeat the run.
#[cfg(feature = "train")]
pub fn write(dir: &std::path::Path, settings: &dpt_tui::settings::Settings) -> std::io::Result<()> {
    let text = format!(
        "# The settings this run trained with; `dpt-tui --config THIS_FILE` repeats it (flags given\n# beside it override them).\n{}",
        settings.to_toml()
    );
    dpt_tui::atomic::write_bytes(&dir.join(CONFIG_FILE), text.as_bytes())
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
        assert_eq!((args.settings.recipe.epochs, args.settings.optimizer.lr), (Some(3), Some(0.1)));
    }

    #[test]
    fn an_earlier_versions_config_toml_reads_back_as_its_settings() {
        // As the previous version wrote it for `--devices cpu:2 --lr 0.1 --seed 3`.
        let text = "model = \"lenet\"\ndata = \"/d\"\ndevices = \"cpu,cpu\"\nepochs = 10\nbatch_size = 256\n\
            optimizer = \"sgd\"\nlr = 0.1\nmomentum = 0\nnesterov = false\nweight_decay = 0\n\
            lr_schedule = \"constant\"\nwarmup_steps = 0\nmin_lr = 0\nlr_gamma = 0.1\nlabel_smoothing = 0\n\
            crop_padding = 0\nhflip = \"off\"\naccumulate = 1\nseed = 3\nmax_bad_images = 0.001\nloader = \"auto\"\n\
            data_memory = 2147483648\nprefetch = 2\ndecode_threads = 2\nlog_every = 50\ncheckpoint_every = \"1\"\n\
            keep_checkpoints = 1\nprecision = \"f32\"\nloss_scale = \"off\"\nbucket_cap_mb = 25\n\
            normalize = \"0.16791370222824017,0.3\"\non_nan = \"stop\"\nstep_timeout = 600\ncpu_threads = 1\n";
        let earlier = earlier_settings(text).expect("reads");
        let mut command = dpt_tui::settings::Settings::default();
        (command.optimizer.lr, command.recipe.seed, command.data.path) = (0.1, 3, "/d".into());
        assert!(dpt_tui::settings::differences(&earlier, &command).is_empty(), "{earlier:?}");
        command.optimizer.lr = 0.2;
        assert_eq!(
            dpt_tui::settings::differences(&earlier, &command),
            ["optimizer.lr = 0.1 in the run, 0.2 in this command"]
        );
    }
}
