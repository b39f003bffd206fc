//! One invocation of `dpt-tui`: from flags to a configured engine, then the dashboard or the
//! headless loop, signals, and the exit status.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use crossbeam_channel::{select, Receiver, Sender};

use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard::{self, theme::Theme};
use dpt_tui::data::Dataset;
use dpt_tui::engine::checkpoint::{checkpoint_path, Checkpoint};
use dpt_tui::engine::device::{cpu_threads_per_replica, resolve_devices, Machine};
use dpt_tui::engine::sgd::Sgd;
use dpt_tui::engine::{Control, Engine, Event, FinishReason, OnNan, Resume, StartError, TrainConfig};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::model::ModelKind;
use dpt_tui::run_dir::{create_run_dir, default_run_dir, spawn_recorder, MetricsWriter};
use dpt_tui::signals::{self, SignalMsg, SignalWatch};

fn input<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Input(e.into())
}

/// The configuration the flags (and a checkpoint being resumed) ask for.
fn configure(args: &Args, machine: Machine, headless: bool) -> Result<TrainConfig, Failure> {
    let checkpoint = match &args.resume {
        Some(path) => Some((Checkpoint::read(path).map_err(input)?, checkpoint_path(path))),
        None => None,
    };
    let model = match (&checkpoint, args.model) {
        (Some((c, _)), None) => c.state.model.parse::<ModelKind>().map_err(|e| input(anyhow!(e)))?,
        (_, Some(m)) => m,
        (None, None) => ModelKind::Lenet,
    };
    let devices = resolve_devices(&args.devices, machine).map_err(input)?;
    let mut cfg = TrainConfig::new(model, devices);
    if let Some((c, _)) = &checkpoint {
        let s = &c.state;
        cfg.epochs = s.epochs;
        cfg.batch_size = s.batch_size;
        cfg.sgd = Sgd { lr: s.lr, momentum: s.momentum, weight_decay: s.weight_decay };
        cfg.seed = s.seed;
    }
    cfg.epochs = args.epochs.unwrap_or(cfg.epochs);
    cfg.batch_size = args.batch_size.unwrap_or(cfg.batch_size);
    cfg.sgd.lr = args.lr.unwrap_or(cfg.sgd.lr);
    cfg.sgd.momentum = args.momentum.unwrap_or(cfg.sgd.momentum);
    cfg.sgd.weight_decay = args.weight_decay.unwrap_or(cfg.sgd.weight_decay);
    cfg.seed = args.seed.unwrap_or(cfg.seed);
    cfg.log_every = args.log_every;
    cfg.max_steps = args.max_steps;
    cfg.check_replicas = args.check_replicas;
    cfg.checkpoint_every = args.checkpoint_every;
    cfg.precision = args.precision;
    cfg.channels_last = args.channels_last.map(|v| v == crate::cli::OnOff::On);
    cfg.on_nan = args.on_nan.unwrap_or(if headless { OnNan::Stop } else { OnNan::Pause });
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
    if let Some((c, path)) = checkpoint {
        cfg.resume = Some(Box::new(Resume::new(c, model, &path).map_err(input)?));
    }
    // Cheap checks first, so a typo does not wait for the data to load.
    cfg.validate_settings().map_err(input)?;
    Ok(cfg)
}

/// Runs one invocation; returns the exit status.
pub fn run(args: Args) -> Result<u8, Failure> {
    let machine = Machine::detect();
    let headless = args.headless || !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal();
    let mut cfg = configure(&args, machine, headless)?;
    let theme =
        Theme::select(args.theme.as_deref(), std::env::var("NO_COLOR").ok().as_deref()).map_err(input)?;

    let mut data = Dataset::load(&args.data).map_err(input)?;
    if let Some(n) = args.train_limit {
        data.train.truncate(n);
    }
    if let Some(n) = args.test_limit {
        data.test.truncate(n);
    }
    cfg.validate(data.train.len(), data.test.len()).map_err(input)?;

    // A resumed run continues in its own directory unless told otherwise.
    let resumed_dir = args.resume.as_ref().and_then(|p| checkpoint_path(p).parent().map(PathBuf::from));
    let run_dir = match (&args.run_dir, resumed_dir) {
        (Some(dir), _) => {
            create_run_dir(dir).map_err(input)?;
            dir.clone()
        }
        (None, Some(dir)) => dir,
        (None, None) => {
            let dir = default_run_dir(cfg.model.name());
            create_run_dir(&dir).map_err(input)?;
            dir
        }
    };
    let metrics = MetricsWriter::create(&run_dir).map_err(input)?;
    cfg.run_dir = Some(run_dir.clone());
    let devices = cfg.devices.clone();

    let watch = SignalWatch::start().context("cannot watch signals").map_err(Failure::Run)?;
    let engine = Engine::start(cfg, Arc::new(data)).map_err(|e| match e {
        StartError::Config(c) => input(c),
        StartError::Engine(e) => Failure::Run(e.into()),
    })?;
    let (events, recorder) = spawn_recorder(engine.events().clone(), metrics)
        .context("cannot start the recorder")
        .map_err(Failure::Run)?;
    let controls = engine.controls();
    let mut printer = HeadlessPrinter::default();
    let mut interrupted = None;
    let mut finish = None;
    if headless {
        finish = headless_loop(&events, &watch.messages, &controls, &mut printer, &mut interrupted);
    } else {
        let opts = dashboard::Options {
            theme,
            ascii: args.ascii || !dashboard::locale_is_utf8(),
            fps: args.fps,
            sample: Duration::from_millis(args.sample_ms),
        };
        match dashboard::run(&events, &watch.messages, controls.clone(), &devices, opts) {
            Ok(end) => {
                interrupted = end.interrupted;
                if end.hangup {
                    // No terminal any more: go on headless, logging to the run directory;
                    // writes to the dead terminal fail quietly.
                    finish =
                        headless_loop(&events, &watch.messages, &controls, &mut printer, &mut interrupted);
                } else {
                    if !end.app.state.is_over() {
                        // The user left before the run ended: stop cleanly and save.
                        let _ = controls.send(Control::Stop);
                    }
                    if let Some(summary) = end.app.summary {
                        finish = Some(summary.reason);
                        printer.print(&Event::Finished(Box::new(summary)), &mut std::io::stdout());
                    }
                }
            }
            Err(e) => {
                let _ = controls.send(Control::Stop);
                let _ = engine.join();
                return Err(Failure::Run(anyhow::Error::new(e).context("the dashboard failed")));
            }
        }
    }
    drop(controls);
    let outcome = engine.join().context("training failed");
    let write_error = recorder.join().ok().flatten();
    drop(watch);
    let resume_hint = format!("resume with: dpt-tui --resume {}", run_dir.display());
    if let Err(e) = outcome {
        println!("{resume_hint} (from the last checkpoint)");
        return Err(Failure::Run(e));
    }
    println!("run directory: {}", run_dir.display());
    if let Some(e) = write_error {
        return Err(Failure::Run(anyhow::Error::new(e).context("metrics were not fully written")));
    }
    match (interrupted, finish) {
        (Some(signal), _) => {
            println!("stopped by {}; {resume_hint}", signals::name(signal));
            Ok(signals::exit_code(signal))
        }
        (None, Some(FinishReason::Diverged)) => {
            println!(
                "stopped: the loss diverged; the last good checkpoint is kept; {resume_hint} --lr <lower>"
            );
            Ok(1)
        }
        (None, Some(FinishReason::Stopped | FinishReason::StepLimit)) => {
            println!("{resume_hint}");
            Ok(0)
        }
        _ => Ok(0),
    }
}

/// Prints events until the run ends; SIGINT/SIGTERM stop the run at the next step boundary,
/// SIGHUP is ignored (the run goes on). Returns why the run finished.
fn headless_loop(
    events: &Receiver<Event>,
    signals: &Receiver<SignalMsg>,
    controls: &Sender<Control>,
    printer: &mut HeadlessPrinter,
    interrupted: &mut Option<i32>,
) -> Option<FinishReason> {
    let mut stdout = std::io::stdout();
    let mut signals = signals.clone();
    let mut finish = None;
    loop {
        select! {
            recv(events) -> ev => match ev {
                Ok(event) => {
                    if let Event::Finished(s) = &event {
                        finish = Some(s.reason);
                    }
                    if !matches!(event, Event::Failed { .. }) {
                        printer.print(&event, &mut stdout);
                    }
                }
                Err(_) => return finish,
            },
            recv(signals) -> sig => match sig {
                Ok(SignalMsg::Stop(number)) => {
                    interrupted.get_or_insert(number);
                    let _ = controls.send(Control::Stop);
                }
                Ok(SignalMsg::Hangup) => {}
                Err(_) => signals = crossbeam_channel::never(),
            },
        }
    }
}
