//! The `dpt-tui` binary: parses flags, loads the data, starts the engine and shows the run in
//! the dashboard (a terminal) or as plain lines (anything else, or `--headless`).
//! Exit status: 0 done, 2 bad input or usage, 1 failure during the run.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Parser;

use dpt_tui::dashboard::{self, theme::Theme};
use dpt_tui::data::Dataset;
use dpt_tui::engine::device::{cpu_threads_per_replica, resolve_devices, Machine};
use dpt_tui::engine::sgd::Sgd;
use dpt_tui::engine::{Engine, Event, StartError, TrainConfig};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::run_dir::{create_run_dir, default_run_dir, spawn_recorder, MetricsWriter};

/// How the program failed, which decides the exit status.
enum Failure {
    /// Bad flags or input files: exit 2.
    Input(anyhow::Error),
    /// The run itself failed: exit 1.
    Run(anyhow::Error),
}

fn main() -> ExitCode {
    let args = cli::Args::parse();
    install_panic_hook();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Input(e)) => {
            eprintln!("dpt-tui: {e:#}");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("dpt-tui: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// A worker's panic is caught at its thread boundary and reported once, as a failed run, so the
/// hook stays silent for workers. Any other panic first restores the terminal, so the message
/// is readable and the shell usable.
fn install_panic_hook() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if dpt_tui::engine::worker::in_worker_thread() {
            return;
        }
        dashboard::terminal::on_panic();
        default_hook(info);
    }));
}

fn input<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Input(e.into())
}

fn run(args: cli::Args) -> Result<(), Failure> {
    let machine = Machine::detect();
    let devices = resolve_devices(&args.devices, machine).map_err(input)?;
    let mut cfg = TrainConfig::new(args.model, devices);
    if let Some(v) = args.epochs {
        cfg.epochs = v;
    }
    if let Some(v) = args.batch_size {
        cfg.batch_size = v;
    }
    cfg.sgd = Sgd {
        lr: args.lr.unwrap_or(cfg.sgd.lr),
        momentum: args.momentum.unwrap_or(cfg.sgd.momentum),
        weight_decay: args.weight_decay,
    };
    cfg.seed = args.seed;
    cfg.log_every = args.log_every;
    cfg.max_steps = args.max_steps;
    cfg.check_replicas = args.check_replicas;
    cfg.cpu_threads = match args.cpu_threads {
        Some(0) => return Err(input(anyhow!("--cpu-threads must be at least 1"))),
        Some(n) => n,
        None => cpu_threads_per_replica(&cfg.devices, machine.cores),
    };
    // Cheap checks first, so a typo does not wait for the data to load.
    cfg.validate(1, 1).map_err(input)?;
    let headless = args.headless || !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal();
    let theme =
        Theme::select(args.theme.as_deref(), std::env::var("NO_COLOR").ok().as_deref()).map_err(input)?;

    let mut data = Dataset::load(&args.data).map_err(input)?;
    if let Some(n) = args.train_limit {
        data.train.truncate(n);
    }
    if let Some(n) = args.test_limit {
        data.test.truncate(n);
    }

    let run_dir = args.run_dir.unwrap_or_else(|| default_run_dir(cfg.model.name()));
    create_run_dir(&run_dir).map_err(input)?;
    let metrics = MetricsWriter::create(&run_dir).map_err(input)?;
    cfg.run_dir = Some(run_dir.clone());
    let devices = cfg.devices.clone();

    let engine = Engine::start(cfg, Arc::new(data)).map_err(|e| match e {
        StartError::Config(c) => input(c),
        StartError::Engine(e) => Failure::Run(e.into()),
    })?;
    let (events, recorder) = spawn_recorder(engine.events().clone(), metrics)
        .context("cannot start the recorder")
        .map_err(Failure::Run)?;

    let mut printer = HeadlessPrinter::default();
    let mut stdout = std::io::stdout();
    if headless {
        for event in events.iter() {
            if !matches!(event, Event::Failed { .. }) {
                printer.print(&event, &mut stdout);
            }
        }
    } else {
        let opts = dashboard::Options {
            theme,
            ascii: args.ascii || !dashboard::locale_is_utf8(),
            fps: args.fps,
            sample: Duration::from_millis(args.sample_ms),
        };
        let controls = engine.controls();
        let app = dashboard::run(events, controls.clone(), &devices, opts);
        if app.is_err() || app.as_ref().is_ok_and(|a| !a.state.is_over()) {
            // The user left before the run ended (or the terminal broke): stop cleanly and save.
            let _ = controls.send(dpt_tui::engine::Control::Stop);
        }
        let app = app.context("the dashboard failed").map_err(Failure::Run)?;
        if let Some(summary) = app.summary {
            printer.print(&Event::Finished(Box::new(summary)), &mut stdout);
        }
    }
    let outcome = engine.join().context("training failed").map_err(Failure::Run);
    let write_error = recorder.join().ok().flatten();
    outcome?;
    println!("run directory: {}", run_dir.display());
    if let Some(e) = write_error {
        return Err(Failure::Run(anyhow::Error::new(e).context("metrics were not fully written")));
    }
    Ok(())
}
