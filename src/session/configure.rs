//! Flags (and a checkpoint being resumed) into a checked training configuration, the data and
//! the run directory: everything that can be bad input is behind [`prepare`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;

use super::input;
use super::model_inputs::{builtin_fits, normalization, parse_normalize, sample_inputs};
use crate::cli::{Args, ModelArg, OnOff};
use crate::Failure;
use dpt_tui::data::Dataset;
use dpt_tui::dist::World;
use dpt_tui::engine::checkpoint::{checkpoint_path, Checkpoint, CheckpointError, CheckpointState};
use dpt_tui::engine::device::{cpu_threads_per_replica, Machine};
use dpt_tui::engine::DeviceId;
use dpt_tui::engine::{OnNan, Resume, SavePolicy, TrainConfig};
use dpt_tui::model::script::ScriptModel;
use dpt_tui::model::ModelKind;
use dpt_tui::remote::runs::absolute;
use dpt_tui::run_dir::{create_run_dir, default_run_dir};

/// The configuration the flags (and a checkpoint being resumed) ask for. `interactive`: a
/// dashboard watches (or may attach), so a diverging loss or a failed final save pauses and
/// waits for the user instead of ending the run.
fn configure(
    args: &Args,
    machine: Machine,
    interactive: bool,
    devices: Vec<DeviceId>,
    world: Option<&World>,
) -> Result<TrainConfig, Failure> {
    let mut script = match &args.model {
        Some(ModelArg::File(path)) => Some(ScriptModel::read(path).map_err(input)?),
        _ => None,
    };
    let resume = read_resume(args, world, &mut script)?;
    let model = match (&resume, &args.model) {
        (_, Some(ModelArg::Builtin(m))) => *m,
        (_, Some(ModelArg::File(_))) => ModelKind::Script,
        (Some(r), None) => r.state.model,
        (None, None) => ModelKind::Lenet,
    };
    let mut cfg = TrainConfig::new(model, devices);
    cfg.script = script.map(Arc::new);
    if let Some(loss) = args.loss {
        if model != ModelKind::Script {
            return Err(input(anyhow!(
                "--loss is for TorchScript models; {} trains with its reference program's loss",
                model.name()
            )));
        }
        cfg.loss = loss.0;
    }
    if let Some(text) = &args.normalize {
        // Checked here for its form; against the data's channels once the data is loaded.
        parse_normalize(text).map_err(input)?;
    }
    if let Some(r) = &resume {
        let s = &r.state;
        cfg.epochs = s.epochs;
        cfg.batch_size = s.batch_size;
        cfg.optim = s.optim();
        cfg.schedule = s.schedule.clone().unwrap_or_default();
        cfg.lr_batch_ref = s.lr_batch_ref;
        cfg.clip_grad_norm = s.clip_grad_norm;
        cfg.label_smoothing = s.label_smoothing;
        cfg.ema = s.ema;
        if let Some(b) = &s.best {
            (cfg.keep_best, cfg.best_metric, cfg.early_stop) = (b.keep, b.metric, b.patience);
        }
        cfg.seed = s.seed;
    }
    cfg.epochs = args.epochs.unwrap_or(cfg.epochs);
    cfg.batch_size = args.batch_size.unwrap_or(cfg.batch_size);
    super::optimizer_flags::apply(args, &mut cfg.optim, resume.as_ref().map(|r| r.state.optim().kind))
        .map_err(input)?;
    let sch = &mut cfg.schedule;
    sch.shape = args.lr_schedule.clone().unwrap_or(sch.shape.clone());
    sch.warmup_steps = args.warmup_steps.unwrap_or(sch.warmup_steps);
    sch.min_lr = args.min_lr.unwrap_or(sch.min_lr);
    sch.gamma = args.lr_gamma.unwrap_or(sch.gamma);
    if args.lr_batch_ref == Some(0) {
        return Err(input(anyhow!("--lr-batch-ref must be at least 1 (the batch --lr was tuned for)")));
    }
    cfg.lr_batch_ref = args.lr_batch_ref.or(cfg.lr_batch_ref);
    cfg.clip_grad_norm = args.clip_grad_norm.or(cfg.clip_grad_norm);
    cfg.label_smoothing = args.label_smoothing.unwrap_or(cfg.label_smoothing);
    cfg.accumulate = args.accumulate.unwrap_or(cfg.accumulate);
    cfg.ema = args.ema.or(cfg.ema);
    cfg.keep_best = args.choice.keep_best.unwrap_or(cfg.keep_best);
    cfg.best_metric = args.choice.best_metric.unwrap_or(cfg.best_metric);
    cfg.early_stop = args.choice.early_stop.or(cfg.early_stop);
    if let Some(path) = &args.init_from {
        if resume.is_some() {
            return Err(input(anyhow!(
                "--init-from starts a new run from other weights; a resumed run continues its own: drop one of them"
            )));
        }
        let init = dpt_tui::engine::init_from::InitFrom::read(path).map_err(input)?;
        cfg.init_from = Some(Box::new(init));
    }
    cfg.seed = args.seed.unwrap_or(cfg.seed);
    cfg.log_every = args.log_every;
    cfg.max_steps = args.max_steps;
    cfg.check_replicas = args.check_replicas;
    cfg.checkpoint_every = args.checkpoint_every;
    if args.keep_checkpoints == 0 {
        return Err(input(anyhow!("--keep-checkpoints must be at least 1 (the newest checkpoint)")));
    }
    cfg.keep_checkpoints = args.keep_checkpoints;
    cfg.data = super::data_flags::data_settings(args, resume.as_ref().and_then(|r| r.state.data.clone()));
    cfg.augment = super::recipe_flags::augmentation(args, resume.as_ref().and_then(|r| r.state.augment));
    super::data_flags::fit_to_augmentation(&mut cfg.data, &cfg.augment).map_err(input)?;
    cfg.precision = args.precision;
    cfg.loss_scale =
        super::recipe_flags::loss_scaling(args, resume.as_ref().and_then(|r| r.state.loss_scaler))
            .map_err(input)?;
    cfg.channels_last = args.channels_last.map(|v| v == OnOff::On);
    if !(args.bucket_cap_mb.is_finite() && args.bucket_cap_mb >= 0.0) {
        return Err(input(anyhow!(
            "--bucket-cap-mb must be a number of MiB ≥ 0 (0: reduce after the backward pass)"
        )));
    }
    cfg.bucket_cap_mb = args.bucket_cap_mb;
    cfg.on_nan = args.on_nan.unwrap_or(if interactive { OnNan::Pause } else { OnNan::Stop });
    cfg.save_policy = if interactive {
        SavePolicy::WaitForUser
    } else {
        if !(args.save_retry_secs.is_finite() && args.save_retry_secs >= 0.0) {
            return Err(input(anyhow!("--save-retry-secs must be a number of seconds ≥ 0")));
        }
        SavePolicy::Retry { tries: args.save_retries, every: Duration::from_secs_f64(args.save_retry_secs) }
    };
    if !(args.step_timeout.is_finite() && args.step_timeout > 0.0) {
        return Err(input(anyhow!("--step-timeout must be a positive number of seconds")));
    }
    cfg.step_timeout = Duration::from_secs_f64(args.step_timeout);
    cfg.cpu_threads = match args.cpu_threads {
        Some(0) => return Err(input(anyhow!("--cpu-threads must be at least 1"))),
        Some(n) => n,
        None => cpu_threads_per_replica(&cfg.devices, machine.cores),
    };
    if let Ok(spec) = std::env::var("DPT_INJECT_FAULT") {
        cfg.faults = spec.parse().map_err(|e: String| input(anyhow!("DPT_INJECT_FAULT: {e}")))?;
    }
    if let Some(r) = resume {
        if r.state.model != model {
            let path = args.resume.as_deref().map(checkpoint_path).unwrap_or_default();
            return Err(input(CheckpointError::OtherModel { path, found: r.state.model, expected: model }));
        }
        cfg.resume = Some(Box::new(r));
    }
    // Cheap checks first, so a typo does not wait for the data to load.
    cfg.validate_settings().map_err(input)?;
    Ok(cfg)
}

/// The checkpoint to continue from, if `--resume` asks for one. In a multi-process run only
/// rank 0 reads it (no shared file system needed): its state goes to the others through the
/// store, its tensors by broadcast.
fn read_resume(
    args: &Args,
    world: Option<&World>,
    script: &mut Option<ScriptModel>,
) -> Result<Option<Resume>, Failure> {
    let Some(path) = &args.resume else { return Ok(None) };
    let mut read = |path: &std::path::Path| -> Result<Resume, anyhow::Error> {
        let ckpt = Checkpoint::read(path)?;
        let model = match &args.model {
            Some(ModelArg::Builtin(m)) => *m,
            Some(ModelArg::File(_)) => ModelKind::Script,
            None => ckpt.state.model,
        };
        if model == ModelKind::Script && script.is_none() {
            *script = Some(recorded_script(&ckpt.state)?);
        }
        Ok(Resume::new(ckpt, model, script.as_ref(), &checkpoint_path(path))?)
    };
    let Some(w) = world else { return read(path).map(Some).map_err(Failure::Input) };
    let mut resume = if w.rank == 0 {
        let result = read(path);
        let shared: Result<CheckpointState, String> = match &result {
            Ok(r) => Ok(r.state.clone()),
            Err(e) => Err(format!("{e:#}")),
        };
        let bytes = serde_json::to_vec(&shared).expect("checkpoint states serialize");
        w.share_bytes("resume", Some(&bytes)).map_err(super::dist::failure)?;
        result.map_err(Failure::Input)?
    } else {
        let bytes = w.share_bytes("resume", None).map_err(super::dist::failure)?;
        let shared: Result<CheckpointState, String> = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Run(anyhow!("rank 0 sent a checkpoint state this version cannot read: {e}"))
        })?;
        let state = shared.map_err(|e| input(anyhow!("rank 0 cannot resume: {e}")))?;
        if state.model == ModelKind::Script && script.is_none() {
            *script = Some(recorded_script(&state).map_err(Failure::Input)?);
        }
        Resume::awaiting(state, script.as_ref())
    };
    let slots = resume.optimizer.iter_mut().map(|(_, t)| t);
    let ema = resume.ema.iter_mut().flat_map(|(p, b)| [p, b]);
    for t in [&mut resume.params, &mut resume.buffers].into_iter().chain(slots).chain(ema) {
        if t.numel() > 0 {
            w.broadcast(t).map_err(super::dist::failure)?;
        }
    }
    Ok(Some(resume))
}

/// The TorchScript model a checkpoint was trained on, from the file it names.
fn recorded_script(state: &CheckpointState) -> Result<ScriptModel, anyhow::Error> {
    let file = state.model_file.as_ref().ok_or_else(|| {
        anyhow!(
            "the checkpoint belongs to a TorchScript model whose file it does not name; pass --model FILE"
        )
    })?;
    Ok(ScriptModel::read(file)?)
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
    if args.continuing {
        cfg.restart = Some(super::restart::restart_by(|k| std::env::var(k).ok()));
    }
    // A theme typo is bad input even where no dashboard opens (yet).
    super::theme(args)?;
    if !(cfg.data.max_bad.is_finite() && (0.0..=1.0).contains(&cfg.data.max_bad)) {
        return Err(input(anyhow!(
            "--max-bad-images takes a share between 0 and 1 such as 0.001, got {}",
            cfg.data.max_bad
        )));
    }
    let mut data = Dataset::load_with(&cfg.data.path, cfg.data.load_options()).map_err(input)?;
    super::data_flags::warn_skipped(&data.skipped);
    super::data_flags::streams_as_asked(&cfg, &data).map_err(input)?;
    builtin_fits(cfg.model, &data)?;
    cfg.normalization = normalization(args, &cfg, &data)?;
    if let Some(n) = cfg.data.train_limit {
        data.train.truncate(n);
    }
    if let Some(n) = cfg.data.test_limit {
        data.test.truncate(n);
    }
    if let Some(f) = cfg.data.val_fraction {
        if data.val.is_some() || data.test_is_val {
            return Err(input(anyhow!(
                "the data set has its own val/ folder, which is the validation split; drop --val-fraction"
            )));
        }
        if !(f.is_finite() && f > 0.0 && f < 1.0) {
            return Err(input(anyhow!(
                "--val-fraction must be a fraction between 0 and 1 such as 0.1, got {f}"
            )));
        }
        if data.train.len() < 2 {
            return Err(input(anyhow!("--val-fraction needs at least 2 training samples")));
        }
        data.carve_val(f, cfg.seed);
    }
    cfg.validate(data.train.len(), data.test.len()).map_err(input)?;
    let replicas = world.as_ref().map_or(cfg.devices.len(), World::total_replicas);
    cfg.loader =
        super::data_flags::loader_config(args, &cfg, &data, (replicas, machine.cores)).map_err(input)?;
    if let Some(script) = cfg.script.as_mut() {
        // Bad models are refused here, before the run directory exists.
        let (sample, max_label) = sample_inputs(&data, &cfg.normalization);
        Arc::make_mut(script).check(&sample, max_label).map_err(input)?;
    }
    if machine.cuda_probed {
        cfg.validate_devices().map_err(input)?;
    }
    if let Some(w) = &world {
        same_data_everywhere(w, data.train.len(), data.test.len())?;
    }
    let leader = world.as_ref().is_none_or(|w| w.rank == 0);
    cfg.world = world.map(Box::new);
    if !leader {
        // Rank 0 owns the run directory; the other ranks keep a log (their output) only.
        return Ok(Prepared { cfg, data, run_dir: None, resumed_from: None });
    }
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
            let dir = default_run_dir(cfg.model.name());
            create_run_dir(&dir).map_err(input)?;
            dir
        }
    };
    if args.continuing {
        super::restart::check_same_settings(&run_dir, &super::config_file::resolved(&cfg))?;
    }
    super::config_file::write(&run_dir, &cfg).map_err(|e| {
        input(anyhow!("cannot write {}: {e}", run_dir.join(super::config_file::CONFIG_FILE).display()))
    })?;
    Ok(Prepared {
        cfg,
        data,
        run_dir: Some(absolute(&run_dir)),
        resumed_from: resumed_dir.map(|d| absolute(&d)),
    })
}

/// Every rank must train on the same number of samples (the same data, the same limits).
fn same_data_everywhere(w: &World, train: usize, test: usize) -> Result<(), Failure> {
    let mut v = [train as f64, -(train as f64), test as f64, -(test as f64)];
    w.allreduce_values(&mut v, dpt_tui::dist::c10d::ReduceOp::Max).map_err(super::dist::failure)?;
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
