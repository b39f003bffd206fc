//! Command-line flags, parsed (`session::configure` resolves them into a training configuration);
//! the values they take are read in `values.rs`.

pub mod bench_args;
mod command;
pub mod reference;
mod settings_args;
mod settings_groups;
mod sweep_args;
mod values;

use std::path::PathBuf;

use clap::Parser;

pub use bench_args::BenchArgs;
pub use command::Command;
pub use settings_args::SettingsArgs;
pub use sweep_args::SweepArgs;

pub use values::OnOff;

/// The command line: `Args`' flags, each setting's help ending with its default from the
/// settings tree (`dpt_tui::settings::Settings::default`, the default model's), where its doc
/// does not say it in words.
pub fn command() -> clap::Command {
    let defaults = dpt_tui::settings::flat(
        &serde_json::to_value(dpt_tui::settings::Settings::default()).expect("settings serialize"),
    );
    let command = <Args as clap::CommandFactory>::command();
    // The monitor (built without training) says so where a user looks first.
    #[cfg(not(feature = "train"))]
    let command = command
        .about("The dashboard for your own PyTorch script (this build has no training: `dpt-tui run -- CMD`, attach, ls, show)")
        .version(concat!(env!("CARGO_PKG_VERSION"), " (monitor, built without libtorch)"));
    command.mut_args(|arg| {
        let shown = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(items) => {
                Some(items.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
            }
            serde_json::Value::Null => None,
            other => Some(other.to_string()),
        };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        match defaults.get(arg.get_id().as_str()).and_then(shown) {
            Some(value) if !help.contains("[default:") && arg.get_action().takes_values() => {
                let help = format!("{} [default: {value}]", help.trim_end_matches('.'));
                arg.help(help)
            }
            _ => arg,
        }
    })
}

/// A flag clap refused, as one line: what was wrong, then clap's tips and the values it takes,
/// without the usage and the pointer to `--help`.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts = Vec::new();
    let mut in_usage = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") {
            in_usage = true;
        } else if line.is_empty() {
            in_usage = false;
        } else if !in_usage && !line.starts_with("For more information") {
            parts.push(line.strip_prefix("error: ").unwrap_or(line));
        }
    }
    parts.join("; ")
}

/// Train neural networks data-parallel over several devices with libtorch, watched live.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "dpt-tui",
    version,
    about,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read settings from a TOML file: tables of the settings tree (`[optimizer]` `lr = 0.1`), or
    /// top-level keys named as the flags (`batch_size = 64`); flags on the command line override
    /// it, and an unknown key is refused. Every run directory holds its run's as config.toml.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// Start the training in the background and print how to attach to it.
    #[arg(long)]
    pub detach: bool,

    /// Internal: run as the background job of a dashboard (output to the run directory).
    #[arg(long, hide = true)]
    pub serve: bool,

    /// Plain progress lines instead of the dashboard (automatic when stdout is not a terminal).
    #[arg(long)]
    pub headless: bool,

    /// Run directory for metrics.jsonl and the weights [default: runs/<timestamp>-<model>].
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// Continue a run from a checkpoint file or a run directory (its checkpoint.safetensors);
    /// the run continues in that directory unless --run-dir names another.
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,

    /// With --resume: continue at this learning rate, the rest of the schedule scaled to it
    /// (as the lr key and a rewind do).
    #[arg(long, value_name = "LR", requires = "resume")]
    pub resume_lr: Option<f64>,

    /// With --resume: skip the next N batches of data after the checkpoint's place (past the
    /// batches of a loss spike, as a rewind with skip does). The same command run again (a
    /// requeue, resuming the run's newer checkpoint) applies neither this nor --resume-lr twice.
    #[arg(long, value_name = "N", requires = "resume")]
    pub skip_batches: Option<usize>,

    /// The signal a scheduler sends before preempting the job (Slurm: `--signal=USR1@120`):
    /// every rank checkpoints at the next step boundary and exits with status 75; the same
    /// command then continues the run. USR1, USR2, TERM or INT.
    #[arg(long, value_name = "SIGNAL", default_value = "USR1", value_parser = dpt_tui::signals::parse_preempt_signal)]
    pub preempt_signal: i32,

    /// Set when `--run-dir` named a run to continue (the same command run again).
    #[arg(skip)]
    #[cfg_attr(not(feature = "train"), allow(dead_code))]
    pub continuing: bool,

    /// This process's rank in a multi-process run [default: $RANK, or Slurm's $SLURM_PROCID].
    #[arg(long, value_name = "N", help_heading = "Processes")]
    pub rank: Option<usize>,

    /// Processes in the run [default: $WORLD_SIZE, or Slurm's $SLURM_NTASKS; 1].
    #[arg(long, help_heading = "Processes", value_name = "N")]
    pub world_size: Option<usize>,

    /// This process's index on its node [default: $LOCAL_RANK, or $SLURM_LOCALID; 0].
    #[arg(long, help_heading = "Processes", value_name = "N")]
    pub local_rank: Option<usize>,

    /// Rank 0's host, where the rendezvous store listens [default: $MASTER_ADDR, or Slurm's
    /// first node].
    #[arg(long, help_heading = "Processes", value_name = "HOST")]
    pub master_addr: Option<String>,

    /// The rendezvous store's port [default: $MASTER_PORT, else 29500].
    #[arg(long, help_heading = "Processes", value_name = "PORT")]
    pub master_port: Option<u16>,

    /// Dashboard colours: dark, light, high-contrast, monochrome, or a .toml file [default:
    /// dark, or monochrome when NO_COLOR is set].
    #[arg(long, help_heading = "Dashboard", value_name = "NAME|PATH")]
    pub theme: Option<String>,

    /// Draw the dashboard with ASCII only (automatic when the locale is not UTF-8).
    #[arg(long, help_heading = "Dashboard")]
    pub ascii: bool,

    /// Most dashboard frames per second.
    #[arg(long, help_heading = "Dashboard", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub fps: u32,

    /// Ring the terminal bell in the dashboard when the run finishes or fails, the loss stops
    /// being finite, or a replica straggles.
    #[arg(long, help_heading = "Dashboard", value_enum, default_value_t = OnOff::On)]
    pub bell: OnOff,

    /// Run this shell command on the same events (in the background job, dashboard or not),
    /// with DPT_EVENT (finished, failed, nan, straggler), DPT_RUN_DIR, DPT_EPOCH, DPT_TEST_ACC
    /// and DPT_MESSAGE in its environment; it never holds up training (killed after 60 s).
    #[arg(long, help_heading = "Dashboard", value_name = "CMD")]
    pub notify: Option<String>,

    /// Device sampling period in milliseconds.
    #[arg(long, help_heading = "Dashboard", value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub sample_ms: u64,

    /// A sweep's flags: many runs from this command (`sweep_args.rs`).
    #[command(flatten)]
    pub sweeps: SweepArgs,

    /// The run's settings, grouped as the settings tree is (`dpt_tui::settings`).
    #[command(flatten)]
    pub settings: SettingsArgs,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::FromArgMatches;

    use super::{command, Args};
    use dpt_tui::settings::Settings;

    /// The training command's flags that are no setting of the tree, and why (clap's own
    /// --help and --version are no arguments of the command it builds).
    const NOT_SETTINGS: &[(&str, &str)] = &[
        ("config", "names a layer of settings (a file), is none"),
        ("resume", "names a layer of settings (the checkpoint's), is none"),
        ("resume_lr", "a change made once at a resume, recorded as the run's event"),
        ("skip_batches", "a change made once at a resume, recorded as the run's event"),
        ("run_dir", "where the run is recorded, not what it computes"),
        ("detach", "how this command runs: in the background"),
        ("serve", "internal: the background job's own mode"),
        ("headless", "how progress is shown"),
        ("preempt_signal", "how the scheduler tells the process, not what it computes"),
        ("rank", "the process's place in the world, given by its launcher"),
        ("world_size", "the process's place in the world, given by its launcher"),
        ("local_rank", "the process's place in the world, given by its launcher"),
        ("master_addr", "the process's place in the world, given by its launcher"),
        ("master_port", "the process's place in the world, given by its launcher"),
        ("theme", "the dashboard's"),
        ("ascii", "the dashboard's"),
        ("fps", "the dashboard's"),
        ("bell", "the dashboard's"),
        ("sample_ms", "the dashboard's device sampling"),
        ("notify", "the alerts' command, run beside the training"),
        ("sweep", "makes many runs, each with its own settings"),
        ("sweep_random", "how many runs a sweep makes"),
        ("max_trials", "how many runs a sweep may make"),
        ("prune", "which of a sweep's runs stop early"),
        ("trial_devices", "where a sweep places its runs"),
    ];

    /// A value each setting's flag takes, for those whose default is absent.
    const SAMPLES: &[(&str, &str)] = &[
        ("model.loss", "nll"),
        ("model.normalize", "0.5,0.25"),
        ("model.init_from", "weights.safetensors"),
        ("data.format", "npz"),
        ("data.image_size", "32,32"),
        ("data.train_limit", "100"),
        ("data.test_limit", "100"),
        ("data.val_fraction", "0.1"),
        ("data.tokenizer", "tokenizer.json"),
        ("data.block_size", "16"),
        ("recipe.steps", "100"),
        ("recipe.eval_every", "10"),
        ("recipe.lr_batch_ref", "256"),
        ("recipe.clip_grad_norm", "1.0"),
        ("recipe.ema", "0.999"),
        ("recipe.augment", "cifar"),
        ("recipe.crop_padding", "4"),
        ("recipe.hflip", "off"),
        ("schedule.shape", "cosine"),
        ("best.metric", "val_loss"),
        ("checkpoints.on_nan", "stop"),
        ("placement.channels_last", "on"),
        ("best.early_stop", "3"),
        ("precision.tf32", "off"),
        ("precision.loss_scale", "on"),
        ("precision.loss_scale_init", "1024"),
        ("precision.loss_scale_interval", "100"),
        ("placement.cpu_threads", "2"),
        ("placement.decode_threads", "2"),
        ("placement.eval_batch_size", "64"),
        ("placement.max_steps", "5"),
    ];

    /// The leaves of a tree keyed `section.key`, absent values (null) included.
    fn leaves(v: &serde_json::Value, prefix: &str, out: &mut BTreeMap<String, serde_json::Value>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    leaves(v, &if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, out);
                }
            }
            leaf => {
                out.insert(prefix.to_owned(), leaf.clone());
            }
        }
    }

    /// The leaves of the flags layer `argv` gives, or why it gives none.
    fn flags_layer(argv: &[&str]) -> Result<BTreeMap<String, serde_json::Value>, String> {
        let matches = command().try_get_matches_from(argv).map_err(|e| format!("{argv:?}: {e}"))?;
        let args = Args::from_arg_matches(&matches).map_err(|e| format!("{argv:?}: {e}"))?;
        let layer = args.settings.layer().map_err(|e| format!("{argv:?}: {e}"))?;
        let mut out = BTreeMap::new();
        leaves(&serde_json::to_value(layer).expect("a layer serializes"), "", &mut out);
        Ok(out)
    }

    /// Every flag of the training command (the subcommands take no settings) but the few of
    /// [`NOT_SETTINGS`] is a setting of the tree by its id, `section.key`, and given alone it
    /// sets that setting and no other in the flags layer: a flag serialized under a name the
    /// tree lacks is refused by the strict flags layer, but only once someone gives it.
    #[test]
    fn every_flag_is_a_setting_of_the_tree_and_sets_only_it() {
        let mut tree = BTreeMap::new();
        leaves(&serde_json::to_value(Settings::default()).expect("settings serialize"), "", &mut tree);
        let empty = flags_layer(&["dpt-tui"]).expect("no flags parse");
        let cmd = command();
        let (mut settings, mut wrong) = (0, Vec::new());
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if NOT_SETTINGS.iter().any(|(n, _)| *n == id) {
                continue;
            }
            settings += 1;
            // A setting's value may be a table of its own (a normalization's mean and std).
            let within = |k: &str| k == id || k.strip_prefix(id).is_some_and(|rest| rest.starts_with('.'));
            if id.split('.').count() != 2 || !tree.keys().any(|k| within(k)) {
                wrong.push(format!("--{} (id {id}) is no setting of the tree", arg.get_long().unwrap_or(id)));
                continue;
            }
            let Some(long) = arg.get_long().map(|l| format!("--{l}")) else {
                wrong.push(format!("{id} has no long name"));
                continue;
            };
            let sample = SAMPLES.iter().find(|(n, _)| *n == id).map(|(_, v)| (*v).to_owned());
            let value = match tree.get(id).unwrap_or(&serde_json::Value::Null) {
                _ if !arg.get_action().takes_values() => None,
                _ if sample.is_some() => sample,
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Array(items) => {
                    Some(items.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
                }
                serde_json::Value::Null => {
                    wrong.push(format!("{long}: no default to give it; add a value to SAMPLES"));
                    continue;
                }
                other => Some(other.to_string()),
            };
            let argv: Vec<&str> = ["dpt-tui", &long].into_iter().chain(value.as_deref()).collect();
            match flags_layer(&argv) {
                Err(e) => wrong.push(e),
                Ok(given) => {
                    let set: Vec<&String> = given.keys().filter(|k| given.get(*k) != empty.get(*k)).collect();
                    if set.is_empty() || !set.iter().all(|k| within(k)) {
                        wrong.push(format!("{argv:?} sets {set:?} in the flags layer, not {id}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert!(settings > 60, "{settings} settings' flags walked");
        for (name, _) in NOT_SETTINGS {
            assert!(cmd.get_arguments().any(|a| a.get_id() == name), "NOT_SETTINGS names no flag {name}");
            assert!(!tree.contains_key(*name), "{name} is a setting");
        }
    }
}
