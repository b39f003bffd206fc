//! A sweep command made into trials: the training command every trial shares (the sweep's own
//! flags taken out), each `--sweep` key matched to its setting's flag, the trials' places on
//! the machine (`place.rs`), and every trial's command checked as the run itself would check
//! it, before any trial starts.

use std::path::{Path, PathBuf};

use anyhow::anyhow;

use crate::cli::Args;
use crate::Failure;
use dpt_tui::device::Machine;
use dpt_tui::sweep::{trials, Axis, SweepFile, Trial, TrialState};

use super::super::input;
use super::place::{slots, Slot};

/// The sweep's flags (with a value, then without), which no trial gets; `--run-dir` names the
/// sweep's folder, and each trial gets its own.
const SWEEP_VALUE_FLAGS: [&str; 6] =
    ["--sweep", "--sweep-random", "--max-trials", "--trial-devices", "--prune", "--run-dir"];
const SWEEP_SWITCHES: [&str; 2] = ["--headless", "--detach"];

/// Flags that make no sense for a sweep, and why.
const REFUSED: [(&str, &str); 5] = [
    ("--devices", "a sweep places each trial itself: give --trial-devices"),
    ("--cpu-threads", "a sweep places each trial itself: give --trial-devices"),
    ("--resume", "a sweep continues when the same command runs again with the same --run-dir"),
    ("--rank", "a sweep runs its trials on this machine"),
    ("--world-size", "a sweep runs its trials on this machine"),
];

/// Swept keys no trial may take, and why.
const UNSWEPT: [(&str, &str); 2] = [
    ("placement.devices", "the sweep places each trial (--trial-devices)"),
    ("placement.cpu_threads", "the sweep places each trial (--trial-devices)"),
];

/// A sweep ready to run: its folder, its plan and the places its trials run in.
pub struct Plan {
    /// The sweep's folder, absolute: trials are started, and recognised, by it.
    pub folder: PathBuf,
    /// The folder as the command named it, for what the sweep says.
    pub shown: PathBuf,
    pub file: SweepFile,
    /// Each swept key's flag (`--lr`), in axis order.
    pub flags: Vec<String>,
    pub slots: Vec<Slot>,
}

/// The sweep `args` asks for, from the command line `argv` as it was typed (before a
/// `--config` file's flags were put in), checked whole.
pub fn plan(args: &Args, argv: &[String]) -> Result<Plan, Failure> {
    for (flag, why) in REFUSED {
        if given(argv, flag) {
            return Err(input(anyhow!("{flag} does not apply to a sweep: {why}")));
        }
    }
    if std::env::var("WORLD_SIZE").is_ok_and(|w| w.trim() != "1") {
        return Err(input(anyhow!(
            "a sweep runs its trials on this machine: start it as one process, not under torchrun or srun"
        )));
    }
    let command = shared(argv);
    let mut axes = Vec::new();
    let mut flags = Vec::new();
    for spec in &args.sweeps.sweep {
        let axis = Axis::parse(spec).map_err(|e| input(anyhow!(e)))?;
        let (key, flag) = setting_flag(&axis.key).map_err(|e| input(anyhow!("--sweep {spec}: {e}")))?;
        if axes.iter().any(|a: &Axis| a.key == key) {
            return Err(input(anyhow!(
                "--sweep {spec}: {key} is swept twice; give all its values in one --sweep"
            )));
        }
        axes.push(Axis { key, values: axis.values });
        flags.push(flag);
    }
    let seed = args.settings.recipe.seed.unwrap_or(0);
    let values = trials(&axes, args.sweeps.sweep_random.map(|n| (n, seed)), args.sweeps.max_trials)
        .map_err(|e| input(anyhow!(e)))?;
    let machine = Machine::survey("auto");
    let per = args.sweeps.trial_devices.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let slots = slots((machine.cuda_devices, machine.cores), per, values.len(), visible.as_deref())
        .map_err(|e| input(anyhow!(e)))?;
    let folder = args.run_dir.clone().unwrap_or_else(|| {
        let model = args.settings.model.name.as_ref().map_or_else(|| "lenet".to_owned(), ToString::to_string);
        let name = Path::new(&model).file_stem().map_or(model.clone(), |s| s.to_string_lossy().into_owned());
        dpt_tui::run_dir::default_run_dir(&format!("sweep-{name}"))
    });
    let shown = folder.clone();
    let folder = std::path::absolute(&folder)
        .map_err(|e| input(anyhow!("cannot resolve the sweep's folder {}: {e}", folder.display())))?;
    let width = values.len().saturating_sub(1).to_string().len().max(3);
    let trials = values
        .into_iter()
        .enumerate()
        .map(|(i, values)| Trial {
            values,
            dir: format!("trial-{i:0width$}"),
            state: TrialState::Pending,
            reason: None,
            pid: None,
            devices: String::new(),
            rungs: Vec::new(),
        })
        .collect();
    let plan = Plan { folder, shown, file: SweepFile { command, axes, trials, pid: None }, flags, slots };
    for (i, t) in plan.file.trials.iter().enumerate() {
        check_trial(&plan.trial_argv(i, &plan.slots[0]))
            .map_err(|e| input(anyhow!("trial {} ({}): {e}", t.dir, plan.describe(i))))?;
    }
    Ok(plan)
}

impl Plan {
    /// Trial `i`'s swept values as `lr=0.1 seed=2` (each key's last part).
    pub fn describe(&self, i: usize) -> String {
        let t = &self.file.trials[i];
        self.file
            .axes
            .iter()
            .zip(&t.values)
            .map(|(a, v)| format!("{}={v}", short_key(&a.key)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Trial `i`'s run directory.
    pub fn trial_dir(&self, i: usize) -> PathBuf {
        self.folder.join(&self.file.trials[i].dir)
    }

    /// The command line (without the program) that runs trial `i` in `slot`: the shared
    /// command, its swept values, its place and its run directory, later flags overriding
    /// earlier ones.
    pub fn trial_argv(&self, i: usize, slot: &Slot) -> Vec<String> {
        let mut argv = self.file.command.clone();
        for (flag, value) in self.flags.iter().zip(&self.file.trials[i].values) {
            argv.push(format!("{flag}={value}"));
        }
        argv.push(format!("--devices={}", slot.devices));
        if let Some(n) = slot.threads {
            argv.push(format!("--cpu-threads={n}"));
        }
        argv.push("--headless".into());
        argv.push(format!("--run-dir={}", self.trial_dir(i).display()));
        argv
    }
}

pub use dpt_tui::sweep::short_key;

/// Whether `flag` is on the command line, alone or as `flag=value`.
fn given(argv: &[String], flag: &str) -> bool {
    argv.iter().any(|a| a == flag || a.strip_prefix(flag).is_some_and(|rest| rest.starts_with('=')))
}

/// The command line without the program and the sweep's own flags.
fn shared(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        if SWEEP_SWITCHES.contains(&a.as_str()) {
            continue;
        }
        if SWEEP_VALUE_FLAGS.contains(&a.as_str()) {
            it.next();
            continue;
        }
        if SWEEP_VALUE_FLAGS.iter().any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('='))) {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// The setting `key` names (its key in the tree, `optimizer.lr`, or its flag's name, `lr` or
/// `batch-size`) and its flag, or why it cannot be swept.
fn setting_flag(key: &str) -> Result<(String, String), String> {
    let command = crate::cli::command();
    let long = key.replace('_', "-");
    let arg = command
        .get_arguments()
        .find(|a| a.get_id().as_str() == key || a.get_long() == Some(long.as_str()))
        .ok_or_else(|| {
            format!("`{key}` is no setting; name one by its key in the settings tree (optimizer.lr) or by its flag (lr), as `dpt-tui --help` lists them")
        })?;
    let id = arg.get_id().as_str().to_owned();
    if !id.contains('.') {
        return Err(format!(
            "--{} is no setting of the run and cannot be swept",
            arg.get_long().unwrap_or(&id)
        ));
    }
    if let Some((_, why)) = UNSWEPT.iter().find(|(k, _)| *k == id) {
        return Err(format!("{id} cannot be swept: {why}"));
    }
    if !arg.get_action().takes_values() {
        return Err(format!("{id} is a switch without a value and cannot be swept"));
    }
    let flag = arg.get_long().map_or_else(|| format!("--{id}"), |l| format!("--{l}"));
    Ok((id, flag))
}

/// Checks a trial's command line as the run checks its own before it loads anything: the
/// flags parse, the settings resolve and are valid; and it does not pause on a loss that is
/// not finite.
fn check_trial(argv: &[String]) -> Result<(), String> {
    let full: Vec<std::ffi::OsString> =
        std::iter::once("dpt-tui".into()).chain(argv.iter().map(Into::into)).collect();
    let expanded = super::super::config_file::expand(full)?;
    let matches =
        crate::cli::command().try_get_matches_from(expanded).map_err(|e| first_line(&e.to_string()))?;
    let args =
        <Args as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|e| first_line(&e.to_string()))?;
    if !args.sweeps.sweep.is_empty() || args.detach {
        // Only a --config file can give them to a trial.
        return Err("its --config file holds `sweep` or `detach`, which a trial cannot take; give them on the command line".to_owned());
    }
    let settings = super::super::configure::asked(&args).map_err(|f| match f {
        Failure::Input(e) | Failure::Run(e) => format!("{e:#}"),
    })?;
    settings.validate().map_err(|e| e.to_string())?;
    if settings.checkpoints.on_nan == Some(dpt_tui::engine::OnNan::Pause) {
        // A trial runs without a dashboard: nobody would answer the pause.
        return Err("--on-nan pause would hold the trial forever: a sweep's trial whose loss stops being finite stops; give --on-nan stop or ignore".to_owned());
    }
    Ok(())
}

/// A clap error's first line, without its `error: `.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text);
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|&a| a.to_owned()).collect()
    }

    #[test]
    fn the_shared_command_leaves_the_sweeps_flags_out() {
        let argv = strings(&[
            "dpt-tui",
            "--sweep",
            "lr=0.1,0.2",
            "--epochs",
            "2",
            "--sweep=seed=1..2",
            "--run-dir",
            "s",
            "--headless",
            "--max-trials=9",
            "--trial-devices",
            "1",
            "--sweep-random",
            "2",
            "--seed",
            "3",
        ]);
        assert_eq!(shared(&argv), strings(&["--epochs", "2", "--seed", "3"]));
        assert!(given(&argv, "--run-dir") && !given(&argv, "--resume"));
        assert!(given(&strings(&["x", "--devices=cpu"]), "--devices"));
        assert!(!given(&strings(&["x", "--devices-extra"]), "--devices"));
    }

    #[test]
    fn keys_are_the_trees_or_the_flags_names() {
        assert_eq!(setting_flag("optimizer.lr").expect("accepted"), ("optimizer.lr".into(), "--lr".into()));
        assert_eq!(setting_flag("lr").expect("accepted"), ("optimizer.lr".into(), "--lr".into()));
        assert_eq!(
            setting_flag("batch_size").expect("accepted"),
            ("recipe.batch_size".into(), "--batch-size".into())
        );
        assert_eq!(setting_flag("seed").expect("accepted").0, "recipe.seed");
        assert!(setting_flag("optimizer.lrr")
            .expect_err("refused")
            .contains("`optimizer.lrr` is no setting"));
        assert!(setting_flag("devices").expect_err("refused").contains("placement.devices cannot be swept"));
        assert!(setting_flag("run-dir").expect_err("refused").contains("--run-dir is no setting"));
        assert_eq!(
            (short_key("optimizer.lr"), short_key("model.name"), short_key("data.path")),
            ("lr", "model", "data")
        );
    }
}
