//! Flags (and a checkpoint being resumed) into a checked training configuration, the data and
//! the run directory: everything that can be bad input is behind [`prepare`] (the dashboard
//! front's share, before its job loads the data, behind [`prepare_front`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;

use super::input;
use super::model_inputs::{builtin_fits, normalization, sample_inputs};
use crate::cli::Args;
use crate::Failure;
use dpt_core::device::DeviceId;
use dpt_tui::data::{Dataset, LoadOptions, Pixels, Split};
use dpt_tui::device::{cpu_threads_per_replica, Machine};
use dpt_tui::dist::World;
use dpt_tui::engine::{Continuation, OnNan, Resume, SavePolicy, TrainConfig};
use dpt_tui::model::script::ScriptModel;
use dpt_tui::persist::checkpoint::{checkpoint_path, Checkpoint, CheckpointError, CheckpointState};
use dpt_tui::record::text::thousands;
use dpt_tui::remote::runs::absolute;
use dpt_tui::run_dir::{create_run_dir, default_run_dir};
use dpt_tui::settings::{ConfigFile, Layers, Settings};

/// The settings the command asks for, before any checkpoint is read: its `--config` file's
/// tables under its flags over the defaults. Its placement is final (a checkpoint carries
/// none), so the devices and the backend are known, and checked, before the ranks meet.
pub fn asked(args: &Args) -> Result<Settings, Failure> {
    let file = config_file(args)?;
    let flags = args.settings.layer().map_err(input)?;
    let asked =
        Layers { checkpoint: None, file: file.as_ref(), flags: Some(flags) }.resolve().map_err(input)?;
    asked.placement.validate().map_err(input)?;
    Ok(asked)
}

/// The `--config` file's tables, if a file is given.
fn config_file(args: &Args) -> Result<Option<ConfigFile>, Failure> {
    args.config.as_deref().map(ConfigFile::read).transpose().map_err(input)
}

/// The settings resolved over a checkpoint's (if any) and checked, and the live resources they
/// name: the TorchScript model, the weights to start from.
struct Settled {
    settings: Settings,
    /// No layer asked for a count of rewind points: the default is sized to the machine.
    points_sized: bool,
    script: Option<ScriptModel>,
    init_from: Option<Box<dpt_tui::persist::init_from::InitFrom>>,
}

/// Resolves and checks the settings over `state`'s, and reads what they name.
fn settle(args: &Args, state: Option<&CheckpointState>) -> Result<Settled, Failure> {
    let file = config_file(args)?;
    let flags = args.settings.layer().map_err(input)?;
    let layers = Layers { checkpoint: state.map(|s| &s.settings), file: file.as_ref(), flags: Some(flags) };
    let settings = layers.resolve().map_err(input)?;
    let points_sized = !layers.asks("checkpoints", "snapshots");
    // Cheap checks first, so a typo does not wait for the data to load.
    settings.validate().map_err(input)?;
    let script = match settings.model.name.file() {
        Some(path) => Some(ScriptModel::read(path).map_err(input)?),
        None => None,
    };
    let init_from = match (&settings.model.init_from, state) {
        (Some(_), Some(_)) if args.settings.model.init_from.is_some() && !args.continuing => {
            return Err(input(anyhow!(
                "--init-from starts a new run from other weights; a resumed run continues its own: drop one of them"
            )))
        }
        // A continued run's weights are its checkpoint's.
        (Some(_), Some(_)) | (None, _) => None,
        (Some(path), None) => Some(Box::new(dpt_tui::persist::init_from::InitFrom::read(path).map_err(input)?)),
    };
    Ok(Settled { settings, points_sized, script, init_from })
}

/// The settings and the run to continue, if `--resume` asks for one. In a multi-process run
/// only rank 0 reads the checkpoint (no shared file system needed) and settles everything it
/// needs first, so the other ranks hear of any failure; they get its state through the store
/// and its tensors by broadcast.
fn settle_with_resume(args: &Args, world: Option<&World>) -> Result<(Settled, Option<Resume>), Failure> {
    let path = args.resume.as_deref().map(checkpoint_path).unwrap_or_default();
    let leader = world.is_none_or(|w| w.rank == 0);
    let (settled, mut resume) = if leader {
        let result =
            args.resume.as_deref().map(Checkpoint::read).transpose().map_err(input).and_then(|ckpt| {
                let settled = settle(args, ckpt.as_ref().map(|c| &c.state))?;
                let model = settled.settings.model_kind();
                let resume = ckpt.map(|c| Resume::new(c, model, settled.script.as_ref(), &path)).transpose();
                Ok((settled, resume.map_err(input)?))
            });
        if let (Some(w), Some(_)) = (world, &args.resume) {
            let shared: Result<&CheckpointState, String> = match &result {
                Ok((_, Some(r))) => Ok(&r.state),
                Ok((_, None)) => Err("no checkpoint".into()),
                Err(Failure::Input(e) | Failure::Run(e)) => Err(format!("{e:#}")),
            };
            let bytes = serde_json::to_vec(&shared).expect("checkpoint states serialize");
            w.share_bytes("resume", Some(&bytes)).map_err(super::dist::failure)?;
        }
        result?
    } else if let (Some(w), Some(_)) = (world, &args.resume) {
        let bytes = w.share_bytes("resume", None).map_err(super::dist::failure)?;
        let shared: Result<CheckpointState, String> = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Run(anyhow!("rank 0 sent a checkpoint state this version cannot read: {e}"))
        })?;
        let state = shared.map_err(|e| input(anyhow!("rank 0 cannot resume: {e}")))?;
        let settled = settle(args, Some(&state))?;
        let model = settled.settings.model_kind();
        if state.model() != model {
            return Err(input(CheckpointError::OtherModel { path, found: state.model(), expected: model }));
        }
        let resume = Resume::awaiting(state, settled.script.as_ref());
        (settled, Some(resume))
    } else {
        (settle(args, None)?, None)
    };
    if let Some(r) = resume.as_mut() {
        let lr = args
            .resume_lr
            .map(|lr| {
                dpt_tui::engine::config_error::check_lr(lr)
                    .map_err(|_| input(anyhow!("--resume-lr must be a positive finite number, got {lr}")))
            })
            .transpose()?;
        let again = r.go_on_as(Continuation { lr, skip: args.skip_batches.unwrap_or(0) });
        if let Some(at) = again.filter(|_| world.is_none_or(|w| w.rank == 0)) {
            eprintln!(
                "dpt-tui: note: {} holds a checkpoint written after --resume-lr/--skip-batches were applied at step {at}; continuing from step {} without applying them again (resume the checkpoint of step {at} to apply them anew)",
                path.display(),
                r.state.global_step
            );
        }
    }
    if let (Some(w), Some(r)) = (world, resume.as_mut()) {
        let slots = r.optimizer.iter_mut().map(|(_, t)| t);
        let ema = r.ema.iter_mut().flat_map(|(p, b)| [p, b]);
        for t in [&mut r.params, &mut r.buffers].into_iter().chain(slots).chain(ema) {
            if t.numel() > 0 {
                w.broadcast(t).map_err(super::dist::failure)?;
            }
        }
    }
    Ok((settled, resume))
}

/// The configuration the flags (and a checkpoint being resumed or continued) ask for, with the
/// model, checked as far as it can be without the data. `interactive`: a dashboard watches (or
/// may attach), so a diverging loss or a failed final save pauses and waits for the user
/// instead of ending the run.
fn configure(
    args: &Args,
    machine: Machine,
    interactive: bool,
    devices: Vec<DeviceId>,
    world: Option<&World>,
) -> Result<TrainConfig, Failure> {
    let (Settled { mut settings, points_sized, script, init_from }, resume) =
        settle_with_resume(args, world)?;
    let cpu_threads =
        settings.placement.cpu_threads.unwrap_or_else(|| cpu_threads_per_replica(&devices, machine.cores));
    // The run's record and config.toml say where it ran, so `--config` repeats it exactly.
    let p = &mut settings.placement;
    p.devices = devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    p.cpu_threads = Some(cpu_threads);
    let c = &settings.checkpoints;
    let on_nan = c.on_nan.unwrap_or(if interactive { OnNan::Pause } else { OnNan::Stop });
    let save_policy = if interactive {
        SavePolicy::WaitForUser
    } else {
        SavePolicy::Retry { tries: c.save_retries, every: Duration::from_secs_f64(c.save_retry_secs) }
    };
    let mut cfg = TrainConfig::with_settings(settings, devices);
    (cfg.cpu_threads, cfg.on_nan, cfg.save_policy) = (cpu_threads, on_nan, save_policy);
    cfg.points_sized = points_sized;
    cfg.kit.script = script.map(Arc::new);
    cfg.kit.init_from = init_from;
    cfg.kit.resume = resume.map(Box::new);
    if let Ok(spec) = std::env::var("DPT_INJECT_FAULT") {
        cfg.kit.faults = spec.parse().map_err(|e: String| input(anyhow!("DPT_INJECT_FAULT: {e}")))?;
    }
    cfg.validate_settings(world.map_or(cfg.devices.len(), World::total_replicas)).map_err(input)?;
    if args.continuing {
        cfg.restart = Some(super::restart::restart_by(|k| std::env::var(k).ok()));
    }
    // A theme typo is bad input even where no dashboard opens (yet).
    super::theme(args)?;
    if machine.cuda_probed {
        cfg.validate_devices().map_err(input)?;
    }
    Ok(cfg)
}

/// A training run, checked and ready to start.
pub struct Prepared {
    pub cfg: TrainConfig,
    pub data: Dataset,
    /// The run directory, absolute (rank 0's only, in a multi-process run).
    pub run_dir: Option<PathBuf>,
    /// The run directory of the checkpoint being resumed, whose `metrics.jsonl` holds the
    /// history the curves and the log continue from.
    pub resumed_from: Option<PathBuf>,
}

/// Checks the flags, loads the data and creates (or reuses, when resuming) the run directory.
pub fn prepare(
    args: &Args,
    machine: Machine,
    interactive: bool,
    devices: Vec<DeviceId>,
    world: Option<World>,
) -> Result<Prepared, Failure> {
    // The same command again on a run directory holding the run continues it.
    let args = &*super::restart::resolve(args, world.as_ref())?;
    let mut cfg = configure(args, machine, interactive, devices, world.as_ref())?;
    let data = load_data(&mut cfg, machine, world.as_ref())?;
    let leader = world.as_ref().is_none_or(|w| w.rank == 0);
    cfg.kit.world = world.map(Box::new);
    if !leader {
        // Rank 0 owns the run directory; the other ranks keep a log (their output) only.
        return Ok(Prepared { cfg, data, run_dir: None, resumed_from: None });
    }
    let (run_dir, resumed_from) = claim_run_dir(args, &cfg, true)?;
    Ok(Prepared { cfg, data, run_dir: Some(run_dir), resumed_from })
}

/// What the dashboard front checks before it starts the job: every setting, the checkpoint and
/// the model, and the run directory claimed (created, or continued); the data is the job's to
/// load, once. The run directory, absolute.
pub fn prepare_front(args: &Args, machine: Machine, devices: Vec<DeviceId>) -> Result<PathBuf, Failure> {
    let args = &*super::restart::resolve(args, None)?;
    let cfg = configure(args, machine, true, devices, None)?;
    // config.toml is the job's to write, once it has taken the data: a refused continuation
    // leaves the run's own.
    Ok(claim_run_dir(args, &cfg, false)?.0)
}

/// Keeps `n` samples of `split` spread evenly over it (`flag`'s limit); what that leaves of a
/// labelled split, for the data line: spread, a class-ordered folder keeps the classes its
/// first `n` would lose.
fn limit(split: &mut Split, n: usize, classes: usize, flag: &str) -> String {
    let len = split.len();
    split.limit(n);
    if n >= len || split.targets.is_some() || matches!(split.images, Pixels::Tokens(_)) {
        return String::new();
    }
    format!(
        " ({flag} {} of {} spread evenly: {} of {classes} classes)",
        thousands(n as i64),
        thousands(len as i64),
        split.classes_present()
    )
}

/// Loads the data, limited and split as the settings say, and checks the configuration
/// against it (what it derives from the data is set here: normalization, the loader).
fn load_data(cfg: &mut TrainConfig, machine: Machine, world: Option<&World>) -> Result<Dataset, Failure> {
    let (d, p) = (&cfg.settings.data, &cfg.settings.placement);
    let options = LoadOptions {
        tokens: super::data_flags::token_layout(cfg),
        ..LoadOptions::of(d, p.loader, p.data_memory)
    };
    let mut data = Dataset::load_with(&d.path, options).map_err(input)?;
    super::data_flags::warn_skipped(&data.skipped);
    super::data_flags::fits_token_data(cfg, &data).map_err(input)?;
    super::data_flags::streams_as_asked(cfg, &data).map_err(input)?;
    builtin_fits(cfg.model(), &data)?;
    cfg.normalization = normalization(cfg, &data)?;
    let classes = data.classes;
    if let Some(n) = cfg.settings.data.train_limit {
        data.source += &limit(&mut data.train, n, classes, "--train-limit");
    }
    if let Some(n) = cfg.settings.data.test_limit {
        data.source += &limit(&mut data.test, n, classes, "--test-limit");
    }
    if let Some(f) = cfg.settings.data.val_fraction {
        if data.val.is_some() || data.test_is_val {
            return Err(input(anyhow!(
                "the data set has its own val/ folder, which is the validation split; drop --val-fraction"
            )));
        }
        if data.train.len() < 2 {
            return Err(input(anyhow!("--val-fraction needs at least 2 training samples")));
        }
        data.carve_val(f, cfg.settings.recipe.seed);
    }
    let replicas = world.map_or(cfg.devices.len(), World::total_replicas);
    cfg.validate((data.train.len(), data.test.len()), replicas).map_err(input)?;
    cfg.loader = super::data_flags::loader_config(cfg, &data, (replicas, machine.cores)).map_err(input)?;
    if let Some(script) = cfg.kit.script.as_mut() {
        // Bad models are refused here, before the run directory exists (the dashboard front's
        // job: after its front claimed it, which then removes a directory it made).
        if let Some(t) = data.train.targets.as_ref().filter(|_| script.inputs != 2) {
            return Err(input(anyhow!(
                "{} holds targets of shape {:?} per sample, not class ids: {}'s forward must take them and return its loss (forward(inputs, targets))",
                data.source,
                t.shape,
                script.file_name()
            )));
        }
        let sample = sample_inputs(&data, &cfg.normalization).map_err(input)?;
        Arc::make_mut(script).check(&sample).map_err(input)?;
        if let Some(vocab) = script.vocab {
            // Every token of both files within the model's vocabulary, before step 0.
            for split in [&data.train, &data.test] {
                if let dpt_tui::data::Pixels::Tokens(w) = &split.images {
                    dpt_tui::data::token_scan::within(&w.file, vocab).map_err(input)?;
                }
            }
        }
        if script.task == dpt_tui::model::Task::ModelLoss && cfg.settings.recipe.label_smoothing > 0.0 {
            return Err(input(anyhow!(
                "{} computes its own loss (forward takes the targets), so --label-smoothing cannot apply: drop it, or smooth inside the model",
                script.file_name()
            )));
        }
    }
    if let Some(w) = world {
        same_data_everywhere(w, data.train.len(), data.test.len())?;
    }
    Ok(data)
}

/// Rank 0's run directory: created, or the one being continued (the continuation checked
/// against the run's settings), with the run's `config.toml` written if `write_config`. The run directory and the
/// one of the checkpoint being resumed, absolute.
fn claim_run_dir(
    args: &Args,
    cfg: &TrainConfig,
    write_config: bool,
) -> Result<(PathBuf, Option<PathBuf>), Failure> {
    // A resumed run continues in its own directory unless told otherwise.
    let resumed_dir = args.resume.as_ref().and_then(|p| {
        checkpoint_path(p).parent().map(|d| {
            if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d.to_owned()
            }
        })
    });
    let run_dir = match (&args.run_dir, &resumed_dir) {
        // The background job of a dashboard front: the front created it.
        (Some(dir), _) if args.serve => dir.clone(),
        (Some(dir), _) => {
            create_run_dir(dir).map_err(input)?;
            dir.clone()
        }
        (None, Some(dir)) => dir.clone(),
        (None, None) => {
            let dir = default_run_dir(cfg.model().name());
            create_run_dir(&dir).map_err(input)?;
            dir
        }
    };
    if let Some(r) = cfg.kit.resume.as_ref().filter(|_| args.continuing) {
        super::restart::check_same_settings(&run_dir, &r.state, &cfg.settings)?;
    }
    if !write_config {
        return Ok((absolute(&run_dir), resumed_dir.map(|d| absolute(&d))));
    }
    super::config_file::write(&run_dir, &cfg.settings).map_err(|e| {
        input(anyhow!("cannot write {}: {e}", run_dir.join(super::config_file::CONFIG_FILE).display()))
    })?;
    Ok((absolute(&run_dir), resumed_dir.map(|d| absolute(&d))))
}

/// Every rank must train on the same number of samples (the same data, the same limits).
fn same_data_everywhere(w: &World, train: usize, test: usize) -> Result<(), Failure> {
    let mut v = [train as f64, -(train as f64), test as f64, -(test as f64)];
    w.allreduce_values(&mut v, dpt_sys::c10d::ReduceOp::Max).map_err(super::dist::failure)?;
    if v[0] != -v[1] || v[2] != -v[3] {
        return Err(input(anyhow!(
            "the ranks have different data: {}..{} training and {}..{} test samples across ranks, {train} and {test} here; give every rank the same data and --train-limit/--test-limit",
            -v[1],
            v[0],
            -v[3],
            v[2]
        )));
    }
    Ok(())
}
