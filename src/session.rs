//! One invocation of `dpt-tui`: from flags to a configured engine, then the dashboard or the
//! headless loop, signals, and the exit status.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use std::os::unix::process::CommandExt;

use crossbeam_channel::{select, unbounded, Receiver, Sender};

use crate::cli::{Args, Command};
use crate::Failure;
use dpt_tui::dashboard::{self, theme::Theme};
use dpt_tui::data::Dataset;
use dpt_tui::engine::checkpoint::{checkpoint_path, Checkpoint};
use dpt_tui::engine::device::{cpu_threads_per_replica, resolve_devices, Machine};
use dpt_tui::engine::sgd::Sgd;
use dpt_tui::engine::{Control, Engine, Event, FinishReason, OnNan, Resume, StartError, TrainConfig};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::model::ModelKind;
use dpt_tui::monitor;
use dpt_tui::remote::hub::{Hub, HubMsg};
use dpt_tui::remote::protocol::Snapshot;
use dpt_tui::remote::{client, runs, server};
use dpt_tui::run_dir::{create_run_dir, default_run_dir, spawn_recorder, MetricsWriter};
use dpt_tui::signals::{self, SignalMsg, SignalWatch};

/// Messages the headless printer may fall behind by (a blocked stdout) before the hub drops it;
/// the channel's slots are allocated up front, so this stays modest (about 5 MB).
const PRINTER_BUFFER: usize = 1 << 16;

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

/// A training run, checked and ready to start: everything that can be bad input is behind it.
struct Prepared {
    cfg: TrainConfig,
    data: Dataset,
    run_dir: PathBuf,
    theme: Theme,
}

/// Checks the flags, loads the data and creates (or reuses, when resuming) the run directory.
fn prepare(args: &Args, machine: Machine, headless: bool) -> Result<Prepared, Failure> {
    let cfg = configure(args, machine, headless)?;
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
        (Some(dir), _) if !args.serve => {
            create_run_dir(dir).map_err(input)?;
            dir.clone()
        }
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) => dir,
        (None, None) => {
            let dir = default_run_dir(cfg.model.name());
            create_run_dir(&dir).map_err(input)?;
            dir
        }
    };
    Ok(Prepared { cfg, data, run_dir, theme })
}

/// Runs one invocation; returns the exit status.
pub fn run(args: Args) -> Result<u8, Failure> {
    match args.command.clone() {
        Some(Command::Attach { run, read_only }) => return attach_command(run, read_only, &args),
        Some(Command::Ls { dir }) => return ls_command(&dir),
        Some(Command::Show { run, png }) => return show_command(&run, png.as_deref(), &args),
        None => {}
    }
    let machine = Machine::detect();
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if args.serve || (!args.detach && (args.headless || !terminal)) {
        return serve(&args, machine);
    }
    front(&args, machine, terminal)
}

/// Trains in this process, printing progress lines, and serves viewers on the run's socket.
fn serve(args: &Args, machine: Machine) -> Result<u8, Failure> {
    let Prepared { mut cfg, data, run_dir, .. } = prepare(args, machine, true)?;
    if args.serve && args.on_nan.is_none() {
        // A job watched through the dashboard pauses on divergence, as the dashboard would.
        cfg.on_nan = OnNan::Pause;
    }
    let metrics = MetricsWriter::create(&run_dir).map_err(input)?;
    cfg.run_dir = Some(run_dir.clone());
    let devices = cfg.devices.clone();
    if args.serve {
        // Fail before training if viewers could never reach the job.
        server::socket_dir().context("cannot serve the dashboard").map_err(Failure::Run)?;
    }
    let watch = SignalWatch::start().context("cannot watch signals").map_err(Failure::Run)?;
    let engine = Engine::start(cfg, Arc::new(data)).map_err(|e| match e {
        StartError::Config(c) => input(c),
        StartError::Engine(e) => Failure::Run(e.into()),
    })?;
    let (events, recorder) = spawn_recorder(engine.events().clone(), metrics)
        .context("cannot start the recorder")
        .map_err(Failure::Run)?;
    let (monitor_tx, monitor_rx) = unbounded();
    let (stop_monitor, monitor_stop) = crossbeam_channel::bounded::<()>(0);
    let monitor = monitor::spawn(&devices, Duration::from_millis(args.sample_ms), monitor_tx, monitor_stop)
        .context("cannot start the device monitor")
        .map_err(Failure::Run)?;
    let (hub, hub_thread) =
        Hub::spawn(events, monitor_rx).context("cannot start the hub").map_err(Failure::Run)?;
    let controls = engine.controls();
    // For a headless run, viewers are a convenience: without a socket it still trains. A
    // background job exists to be attached to: without one it stops and says why.
    let socket = match server::serve(&run_dir, hub.clone(), controls.clone()) {
        Ok(path) => Some(path),
        Err(e) if args.serve => {
            let _ = controls.send(Control::Stop);
            drop(controls);
            let _ = engine.join();
            return Err(Failure::Run(anyhow!("cannot serve the dashboard: {e}")));
        }
        Err(e) => {
            eprintln!("dpt-tui: warning: viewers cannot attach ({e})");
            None
        }
    };
    let (snapshot, printed) =
        hub.subscribe(PRINTER_BUFFER).ok_or_else(|| Failure::Run(anyhow!("the run ended at once")))?;
    drop(hub);
    let mut printer = HeadlessPrinter::default();
    // What happened before the printer subscribed (the start, at least) comes first.
    for event in &snapshot.events {
        printer.print(event, &mut std::io::stdout());
    }
    let mut interrupted = None;
    let finish = headless_loop(&printed, &watch.messages, &controls, &mut printer, &mut interrupted);
    drop(controls);
    let outcome = engine.join().context("training failed");
    let write_error = recorder.join().ok().flatten();
    let _ = hub_thread.join();
    drop(stop_monitor);
    let _ = monitor.join();
    drop(watch);
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(run_dir.join(server::SERVER_FILE));
    }
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

/// Starts the job in the background (its own session, output to `server.log` in the run
/// directory), then attaches the dashboard to it, or with `--detach` just says how to.
fn front(args: &Args, machine: Machine, terminal: bool) -> Result<u8, Failure> {
    let prepared = prepare(args, machine, false)?;
    let run_dir = prepared.run_dir.clone();
    let log_path = run_dir.join("server.log");
    let log = std::fs::File::create(&log_path).context("cannot create server.log").map_err(Failure::Run)?;
    let mut cmd = std::process::Command::new(
        std::env::current_exe().context("cannot find dpt-tui").map_err(Failure::Run)?,
    );
    cmd.args(std::env::args_os().skip(1).filter(|a| a != "--detach")).arg("--serve");
    if args.run_dir.is_none() && args.resume.is_none() {
        cmd.arg("--run-dir").arg(&run_dir);
    }
    let err_log = log.try_clone().context("cannot open server.log").map_err(Failure::Run)?;
    cmd.stdin(std::process::Stdio::null()).stdout(log).stderr(err_log);
    // SAFETY: setsid is async-signal-safe; the job leaves this terminal's session, so closing
    // the terminal or losing the SSH connection does not signal it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the background job").map_err(Failure::Run)?;
    // Wait for the job to serve its socket (or to fail on the way).
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        if client::server_info(&run_dir).is_some_and(|i| i.pid == child.id()) && client::is_live(&run_dir) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_owned();
            let e = anyhow!("the background job exited ({status}): {last}");
            return Err(if status.code() == Some(2) { Failure::Input(e) } else { Failure::Run(e) });
        }
        if std::time::Instant::now() > deadline {
            return Err(Failure::Run(anyhow!(
                "the background job did not start; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if args.detach || !terminal {
        println!("training in the background (pid {}), logging to {}", child.id(), log_path.display());
        println!("attach with: dpt-tui attach {}", run_dir.display());
        return Ok(0);
    }
    view_job(&run_dir, false, args, prepared.theme)
}

/// The dashboard on the job of `run_dir`, and the exit status that follows.
fn view_job(run_dir: &std::path::Path, read_only: bool, args: &Args, theme: Theme) -> Result<u8, Failure> {
    let attached = client::attach(run_dir, read_only).map_err(|e| Failure::Run(e.into()))?;
    let watch = SignalWatch::start().context("cannot watch signals").map_err(Failure::Run)?;
    let source = dashboard::Source {
        snapshot: attached.snapshot,
        events: attached.events,
        monitor: attached.monitor,
        controls: (!read_only).then_some(attached.controls),
        attached: true,
    };
    let end = dashboard::run(source, &watch.messages, dashboard_options(args, theme))
        .map_err(|e| Failure::Run(anyhow::Error::new(e).context("the dashboard failed")))?;
    let mut stdout = std::io::stdout();
    if end.app.detached || end.hangup {
        println!("detached; training goes on. attach with: dpt-tui attach {}", run_dir.display());
        return Ok(0);
    }
    let stopped_early = end.app.summary.as_ref().is_some_and(|s| s.reason != FinishReason::Completed);
    if let Some(summary) = end.app.summary {
        HeadlessPrinter::default().print(&Event::Finished(Box::new(summary)), &mut stdout);
    }
    println!("run directory: {}", run_dir.display());
    if stopped_early && end.interrupted.is_none() {
        println!("resume with: dpt-tui --resume {}", run_dir.display());
    }
    if end.app.state == dashboard::app::RunState::Disconnected {
        if client::is_live(run_dir) {
            println!(
                "lost the connection to the job; it goes on. attach with: dpt-tui attach {}",
                run_dir.display()
            );
            return Ok(0);
        }
        println!("resume with: dpt-tui --resume {} (from the last checkpoint)", run_dir.display());
        return Err(Failure::Run(anyhow!(
            "the job ended without a final report; see {}",
            run_dir.join("server.log").display()
        )));
    }
    if let Some(message) = end.app.failure {
        println!("resume with: dpt-tui --resume {} (from the last checkpoint)", run_dir.display());
        return Err(Failure::Run(anyhow!("training failed: {message}")));
    }
    if let Some(signal) = end.interrupted {
        println!("stopped by {}; resume with: dpt-tui --resume {}", signals::name(signal), run_dir.display());
        return Ok(signals::exit_code(signal));
    }
    Ok(0)
}

fn dashboard_options(args: &Args, theme: Theme) -> dashboard::Options {
    dashboard::Options {
        theme,
        ascii: args.ascii || !dashboard::locale_is_utf8(),
        fps: args.fps,
        sample: Duration::from_millis(args.sample_ms),
    }
}

fn attach_command(run: Option<PathBuf>, read_only: bool, args: &Args) -> Result<u8, Failure> {
    let run_dir = match run {
        Some(r) => r,
        None => runs::latest(std::path::Path::new("runs")).ok_or_else(|| {
            input(anyhow!("no runs under ./runs; name the run directory: dpt-tui attach DIR"))
        })?,
    };
    let theme =
        Theme::select(args.theme.as_deref(), std::env::var("NO_COLOR").ok().as_deref()).map_err(input)?;
    if !client::is_live(&run_dir) {
        let state =
            runs::inspect(&run_dir).map_or("not a run directory".to_owned(), |e| e.state.label().to_owned());
        return Err(input(anyhow!(
            "{} is not running ({state}); 'dpt-tui show {}' opens its record, 'dpt-tui --resume {}' continues it",
            run_dir.display(),
            run_dir.display(),
            run_dir.display()
        )));
    }
    view_job(&run_dir, read_only, args, theme)
}

fn ls_command(dir: &std::path::Path) -> Result<u8, Failure> {
    let runs = runs::list(dir);
    if runs.is_empty() {
        println!("no runs in {}", dir.display());
        return Ok(0);
    }
    println!("{:<10} {:<10} {:<18} {:>9} {:>9}  RUN", "STATE", "MODEL", "DEVICES", "EPOCHS", "BEST ACC");
    for r in runs {
        let state = if r.resumable { format!("{}*", r.state.label()) } else { r.state.label().to_owned() };
        let acc = r.best_test_acc.map_or("-".to_owned(), |a| format!("{a:.3}"));
        println!(
            "{:<10} {:<10} {:<18} {:>9} {:>9}  {}",
            state,
            r.model,
            r.devices.join(","),
            format!("{}/{}", r.epochs_done, r.epochs),
            acc,
            r.path.display()
        );
    }
    println!("(* resumable: dpt-tui --resume RUN)");
    Ok(0)
}

fn show_command(
    run_dir: &std::path::Path,
    png: Option<&std::path::Path>,
    args: &Args,
) -> Result<u8, Failure> {
    let history = runs::read_history(run_dir).map_err(|e| {
        input(anyhow!("cannot read {}/metrics.jsonl: {e}; name a run directory", run_dir.display()))
    })?;
    if let Some(path) = png {
        dpt_tui::report::write_png(&history, path).map_err(|e| input(anyhow!("{e}")))?;
        println!("wrote {}", path.display());
        return Ok(0);
    }
    let theme =
        Theme::select(args.theme.as_deref(), std::env::var("NO_COLOR").ok().as_deref()).map_err(input)?;
    let watch = SignalWatch::start().context("cannot watch signals").map_err(Failure::Run)?;
    let source = dashboard::Source {
        snapshot: Snapshot { events: history, monitor: Vec::new() },
        events: crossbeam_channel::never(),
        monitor: crossbeam_channel::never(),
        controls: None,
        attached: false,
    };
    dashboard::run(source, &watch.messages, dashboard_options(args, theme))
        .map_err(|e| Failure::Run(anyhow::Error::new(e).context("the dashboard failed")))?;
    Ok(0)
}

/// Prints events until the run ends; SIGINT/SIGTERM stop the run at the next step boundary,
/// SIGHUP is ignored (the run goes on). Returns why the run finished.
fn headless_loop(
    events: &Receiver<HubMsg>,
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
                Ok(HubMsg::Monitor(_)) => {}
                Ok(HubMsg::Event(event)) => {
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
