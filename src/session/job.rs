//! The training job itself: trains in this process, records to the run directory, serves
//! viewers on the run's socket and prints progress lines. It runs in the foreground (headless,
//! pipes, CI) or as the background job a dashboard front started (`--serve`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use crossbeam_channel::{select, unbounded, Receiver, Sender};

use super::configure::{prepare, Prepared};
use super::{failed, input, tensorboard, watch_signals, PRINTER_BUFFER};
use crate::cli::Args;
use crate::Failure;
use dpt_sys::c10d::Store;
use dpt_tui::data::Dataset;
use dpt_tui::device::Machine;
use dpt_tui::dist::figures;
use dpt_tui::dist::launch::Launch;
use dpt_tui::engine::{Control, Engine, EngineError, FinishReason, StartError, TrainConfig};
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::monitor;
use dpt_tui::record::file::{spawn_recorder, MetricsWriter};
use dpt_tui::record::history::History;
use dpt_tui::record::{Change, Record};
use dpt_tui::remote::hub::{Hub, HubMsg};
use dpt_tui::remote::{registry, server};
use dpt_tui::settings::Settings;
use dpt_tui::signals::{self, SignalMsg};

/// Why the engine did not start, as an exit status.
fn start_failure(e: StartError) -> Failure {
    match e {
        StartError::Config(c) => input(c),
        StartError::Engine(EngineError::Dist(e)) => super::dist::failure(e),
        StartError::Engine(e) => Failure::Run(e.into()),
        StartError::Seed(e) | StartError::Math(e) => Failure::Run(e.into()),
        StartError::Data(e) => input(*e),
        StartError::Memory(e) => input(*e),
        StartError::SyncDebug(e) => input(anyhow::anyhow!(e)),
        e @ StartError::ScriptWeights(_) => input(anyhow::anyhow!(e.to_string())),
    }
}

/// Trains, printing progress lines; returns the exit status. With a `launch`, this process is
/// one rank of several: it meets the others first, and only rank 0 records and serves.
pub fn run(args: &Args, asked: &Settings, machine: Machine, launch: Option<Launch>) -> Result<u8, Failure> {
    let devices = super::dist::devices(asked, machine, launch.as_ref())?;
    let world = match &launch {
        Some(l) => Some(super::dist::join(args, asked, l, &devices)?),
        None => None,
    };
    // The processes of a node share its cores: as many as the launcher says, or as the
    // rendezvous found on this host (ranks started by hand set no LOCAL_WORLD_SIZE).
    let local = launch
        .as_ref()
        .map_or(1, |l| l.local_world_size)
        .max(world.as_ref().map_or(1, |w| w.hosts.iter().filter(|h| **h == w.hosts[w.rank]).count()));
    let machine = Machine { cores: (machine.cores / local).max(1), ..machine };
    // A background job is watched through a dashboard: it pauses on divergence or a failed
    // final save, as the dashboard would, instead of ending the run.
    // Device figures travel beside the collectives, through the store.
    let side = match &world {
        Some(w) => Some((w.side_store().map_err(super::dist::failure)?, w.rank, w.size)),
        None => None,
    };
    let Prepared { mut cfg, data, run_dir, resumed_from } =
        prepare(args, machine, args.serve, devices, world)?;
    let Some(run_dir) = run_dir else { return follow(args, cfg, data, side) };
    let metrics = MetricsWriter::create(&run_dir).map_err(input)?;
    // The curves and the log continue from the run's own record, not from the checkpoint.
    let history = resumed_from.and_then(|d| History::read(&d).ok()).unwrap_or_default();
    cfg.run_dir = Some(run_dir.clone());
    let devices = cfg.devices.clone();
    if args.serve {
        // Fail before training if viewers could never reach the job.
        registry::socket_dir().map_err(failed("cannot serve the dashboard"))?;
    }
    let watch = watch_signals(args)?;
    let engine = Engine::start(cfg, Arc::new(data)).map_err(start_failure)?;
    let (monitor_tx, monitor_rx) = unbounded();
    let recorder = spawn_recorder(engine.events().clone(), monitor_rx, metrics, tensorboard(&run_dir))
        .map_err(failed("cannot start the recorder"))?;
    let (stop_monitor, monitor_stop) = crossbeam_channel::bounded::<()>(0);
    let period = Duration::from_millis(args.sample_ms);
    let collector = match side {
        Some((store, _, size)) => Some(
            figures::spawn_collector(store, size, period, monitor_tx.clone(), monitor_stop.clone())
                .map_err(failed("cannot start the device collector"))?,
        ),
        None => None,
    };
    let monitor = monitor::spawn(&devices, period, monitor_tx, monitor_stop)
        .map_err(failed("cannot start the device monitor"))?;
    // The printer's subscription (and the notifier's) is made as the hub starts: a run short
    // enough to end before they could ask would otherwise leave them nothing.
    let first = if args.notify.is_some() { vec![PRINTER_BUFFER; 2] } else { vec![PRINTER_BUFFER] };
    let (hub, mut subscriptions, hub_thread) =
        Hub::spawn(history, recorder.records, recorder.readings, &first)
            .map_err(failed("cannot start the hub"))?;
    let controls = engine.controls();
    // For a headless run, viewers are a convenience: without a socket it still trains. A
    // background job exists to be attached to: without one it stops and says why.
    let served = match server::serve(&run_dir, hub.clone(), controls.clone()) {
        Ok(served) => Some(served),
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
    let (snapshot, printed) = subscriptions.remove(0);
    // --notify: the alerts of this run (from its start on), off the training's path.
    let notifier = match (&args.notify, subscriptions.pop()) {
        (Some(command), Some((seen, live))) => {
            let skip = seen.records.iter().rposition(|r| matches!(r, Record::Start(_))).unwrap_or(0);
            let records =
                seen.records.into_iter().skip(skip).chain(live.into_iter().filter_map(HubMsg::record));
            Some(
                dpt_tui::alert::spawn_notifier(command.clone(), run_dir.clone(), records)
                    .map_err(failed("cannot start the notifier"))?,
            )
        }
        _ => None,
    };
    drop(hub);
    let mut printer = HeadlessPrinter::default();
    // What happened before the printer subscribed (the start, at least) comes first; a resumed
    // run's earlier history is in the file already and is not printed again.
    let skip = snapshot.records.iter().rposition(|r| matches!(r, Record::Start(_))).unwrap_or(0);
    for record in &snapshot.records[skip..] {
        printer.print(record, &mut std::io::stdout());
    }
    let mut interrupted = None;
    let finish =
        headless_loop(&printed, HubMsg::record, &watch.messages, &controls, &mut printer, &mut interrupted);
    drop(controls);
    let outcome = engine.join();
    let write_error = recorder.thread.join().ok().flatten();
    let _ = hub_thread.join();
    if let Some(n) = notifier {
        // The last alert (the finish) is started before the job exits.
        let _ = n.join();
    }
    drop(stop_monitor);
    let _ = monitor.join();
    if let Some(c) = collector {
        let _ = c.join();
    }
    drop(watch);
    if let Some(served) = served {
        served.withdraw();
    }
    let resume_hint = format!("resume with: dpt-tui --resume {}", run_dir.display());
    if let Err(e) = outcome {
        println!("{}", super::resume_from_checkpoint(&run_dir));
        return Err(Failure::Run(anyhow::Error::new(e).context("training failed")));
    }
    println!("run directory: {}", run_dir.display());
    if let Some(e) = write_error {
        return Err(Failure::Run(anyhow::Error::new(e).context("metrics were not fully written")));
    }
    match (interrupted, finish) {
        (_, Some(FinishReason::Preempted)) => {
            println!("preempted: checkpointed; run the same command again to continue ({resume_hint})");
            Ok(signals::EX_TEMPFAIL)
        }
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
        (None, Some(FinishReason::Stopped | FinishReason::StepLimit | FinishReason::EarlyStopped)) => {
            println!("{resume_hint}");
            Ok(0)
        }
        _ => Ok(0),
    }
}

/// A rank other than 0: trains in step with the others and prints its progress lines (its
/// log); rank 0 records, saves and serves the run.
fn follow(
    args: &Args,
    cfg: TrainConfig,
    data: Dataset,
    side: Option<(Store, usize, usize)>,
) -> Result<u8, Failure> {
    // This rank's device figures go to rank 0's dashboard.
    let (readings_tx, readings) = unbounded();
    let (stop_monitor, monitor_stop) = crossbeam_channel::bounded::<()>(0);
    let monitor =
        monitor::spawn(&cfg.devices, Duration::from_millis(args.sample_ms), readings_tx, monitor_stop)
            .map_err(failed("cannot start the device monitor"))?;
    let publisher = match side {
        Some((store, rank, _)) => Some(
            figures::spawn_publisher(store, rank, dpt_tui::hostname(), readings)
                .map_err(failed("cannot start the device publisher"))?,
        ),
        None => None,
    };
    let watch = watch_signals(args)?;
    let engine = Engine::start(cfg, Arc::new(data)).map_err(start_failure)?;
    let controls = engine.controls();
    let records = engine.events().clone();
    let (mut printer, mut interrupted) = (HeadlessPrinter::default(), None);
    let finish = headless_loop(&records, Some, &watch.messages, &controls, &mut printer, &mut interrupted);
    drop(controls);
    let outcome = engine.join();
    drop(watch);
    drop(stop_monitor);
    let _ = monitor.join();
    if let Some(p) = publisher {
        let _ = p.join();
    }
    match (outcome, interrupted) {
        (Err(EngineError::Dist(e)), _) if e.is_input() => Err(super::dist::failure(e)),
        // Worded as rank 0 words it, so every rank says the same line.
        (Err(e), _) => Err(Failure::Run(anyhow::Error::new(e).context("training failed"))),
        (Ok(_), _) if finish == Some(FinishReason::Preempted) => Ok(signals::EX_TEMPFAIL),
        (Ok(_), Some(signal)) => Ok(signals::exit_code(signal)),
        (Ok(_), None) => Ok(0),
    }
}

/// Prints records until the run ends; SIGINT/SIGTERM stop the run at the next step boundary,
/// SIGHUP is ignored (the run goes on). Returns why the run finished.
fn headless_loop<M>(
    records: &Receiver<M>,
    as_record: impl Fn(M) -> Option<Record>,
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
            recv(records) -> msg => match msg.map(&as_record) {
                Ok(None) => {}
                Ok(Some(record)) => {
                    if let Record::Summary(s) = &record {
                        finish = Some(s.reason);
                    }
                    // The failure is the exit message; it is not printed twice.
                    if !matches!(record, Record::Event(Change::Failed { .. })) {
                        printer.print(&record, &mut stdout);
                    }
                }
                Err(_) => return finish,
            },
            recv(signals) -> sig => match sig {
                Ok(SignalMsg::Stop(number)) => {
                    interrupted.get_or_insert(number);
                    let _ = controls.send(Control::Stop);
                }
                // The exit status follows the run's end (preempted), on every rank alike.
                Ok(SignalMsg::Preempt(_)) => {
                    let _ = controls.send(Control::Preempt);
                }
                Ok(SignalMsg::Hangup) => {}
                Err(_) => signals = crossbeam_channel::never(),
            },
        }
    }
}
