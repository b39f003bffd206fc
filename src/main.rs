//! The `dpt-tui` binary: parses flags, loads the data, starts the engine and reports the run.
//! Exit status: 0 done, 2 bad input or usage, 1 failure during the run.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clap::Parser;

use dpt_tui::data::Dataset;
use dpt_tui::engine::device::{cpu_threads_per_replica, resolve_devices, Machine};
use dpt_tui::engine::sgd::Sgd;
use dpt_tui::engine::{Engine, Event, StartError, TrainConfig};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::run_dir::{create_run_dir, default_run_dir, MetricsWriter};

/// How the program failed, which decides the exit status.
enum Failure {
    /// Bad flags or input files: exit 2.
    Input(anyhow::Error),
    /// The run itself failed: exit 1.
    Run(anyhow::Error),
}

fn main() -> ExitCode {
    let args = cli::Args::parse();
    // A worker's panic is caught at its thread boundary and reported once, as a failed run;
    // the default hook would print it (and libtorch's backtrace) a second time.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !dpt_tui::engine::worker::in_worker_thread() {
            default_hook(info);
        }
    }));
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

fn run(args: cli::Args) -> Result<(), Failure> {
    let machine = Machine::detect();
    let devices = resolve_devices(&args.devices, machine).map_err(|e| Failure::Input(e.into()))?;
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
        Some(0) => return Err(Failure::Input(anyhow!("--cpu-threads must be at least 1"))),
        Some(n) => n,
        None => cpu_threads_per_replica(&cfg.devices, machine.cores),
    };
    // Cheap checks first, so a typo does not wait for the data to load.
    cfg.validate(1, 1).map_err(|e| Failure::Input(e.into()))?;

    let mut data = Dataset::load(&args.data).map_err(|e| Failure::Input(e.into()))?;
    if let Some(n) = args.train_limit {
        data.train.truncate(n);
    }
    if let Some(n) = args.test_limit {
        data.test.truncate(n);
    }

    let run_dir = args.run_dir.unwrap_or_else(|| default_run_dir(cfg.model.name()));
    create_run_dir(&run_dir).map_err(|e| Failure::Input(e.into()))?;
    let mut metrics = MetricsWriter::create(&run_dir).map_err(|e| Failure::Input(e.into()))?;
    cfg.run_dir = Some(run_dir.clone());

    if !args.headless && std::io::stdout().is_terminal() {
        eprintln!("dpt-tui: the dashboard is not built yet; showing headless progress");
    }
    let engine = Engine::start(cfg, Arc::new(data)).map_err(|e| match e {
        StartError::Config(c) => Failure::Input(c.into()),
        StartError::Engine(e) => Failure::Run(e.into()),
    })?;

    let mut printer = HeadlessPrinter::default();
    let mut stdout = std::io::stdout().lock();
    let mut write_error = None;
    for event in engine.events().iter() {
        if let Err(e) = metrics.record(&event) {
            // Keep training; report the lost log once at the end.
            write_error.get_or_insert(e);
        }
        if let Event::Failed { .. } = event {
            continue; // reported once, below, on stderr
        }
        printer.print(&event, &mut stdout);
    }
    let outcome = engine.join().context("training failed").map_err(Failure::Run)?;
    let _ = outcome;
    println!("run directory: {}", run_dir.display());
    if let Some(e) = write_error {
        return Err(Failure::Run(anyhow::Error::new(e).context("metrics were not fully written")));
    }
    Ok(())
}
