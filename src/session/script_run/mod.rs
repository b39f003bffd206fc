//! `dpt-tui run -- CMD`: the user's own training script as a run. The script is a child in a
//! process group of its own that finds the backend through its environment; the run directory,
//! its record, TensorBoard events, the attach socket and the device monitor are a native run's.
//! In a terminal the dashboard opens on it, else its records and its output are printed. The
//! script's exit status is dpt-tui's.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::anyhow;
use crossbeam_channel::{bounded, select, unbounded, Receiver};

use super::{dashboard_options, failed, input, theme, watch_signals};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard;
use dpt_tui::headless::HeadlessPrinter;
use dpt_tui::monitor;
use dpt_tui::record::file::{spawn_recorder, MetricsWriter};
use dpt_tui::record::history::History;
use dpt_tui::record::{Change, Record};
use dpt_tui::remote::hub::{Hub, HubMsg};
use dpt_tui::remote::{client, registry, server};
use dpt_tui::run_dir::{create_run_dir, default_run_dir};
use dpt_tui::script::backend::{self, Event, Setup};
use dpt_tui::signals::SignalMsg;

mod child;

use child::{exit_code, start, words, Script, OUTPUT_FILE};

/// The lines of a script's output said again when it ended before the dashboard could open.
const REPLAYED_LINES: usize = 200;

/// `dpt-tui run`'s flags.
pub struct Options {
    pub run_dir: Option<PathBuf>,
    pub headless: bool,
    pub notify: Option<String>,
    pub for_pid: Option<u32>,
    pub endpoint: Option<PathBuf>,
    pub command: Vec<OsString>,
}

/// Runs the script (or serves the process that started this backend); returns its exit status.
pub fn run(o: &Options, args: &Args) -> Result<u8, Failure> {
    let command: Vec<String> =
        o.command.iter().map(|a| a.clone().into_string()).collect::<Result<_, _>>().map_err(|a| {
            input(anyhow!("the command's arguments must be UTF-8 text: {}", a.to_string_lossy()))
        })?;
    if command.is_empty() && o.for_pid.is_none() {
        return Err(input(anyhow!(
            "run needs the script's command after --, e.g. dpt-tui run -- python train.py"
        )));
    }
    let fresh = o.run_dir.as_ref().is_none_or(|d| !d.exists());
    let run_dir = o.run_dir.clone().unwrap_or_else(|| default_run_dir(&label(&command)));
    create_run_dir(&run_dir).map_err(input)?;
    let run_dir = run_dir.canonicalize().map_err(failed("cannot resolve the run directory"))?;
    let outcome = serve(o, args, command, &run_dir);
    if let Ok(Served { greeted: false, .. }) | Err(_) = &outcome {
        if fresh {
            // Nothing was recorded: the directory made for the run goes again.
            let _ = std::fs::remove_dir_all(&run_dir);
        }
    }
    let served = outcome?;
    if !served.greeted {
        let what = served.status.map_or_else(|| "ended".to_owned(), |s| format!("exited ({})", words(s)));
        eprintln!("dpt-tui: the script {what} before calling dpt_tui.init: nothing was recorded");
    } else {
        println!("run directory: {}", run_dir.display());
    }
    Ok(served.status.map_or(0, exit_code))
}

/// What a script run came to.
struct Served {
    /// The script's exit status (none when this backend served a process it did not start).
    status: Option<ExitStatus>,
    /// A rank said hello: the run has a record.
    greeted: bool,
}

fn serve(o: &Options, args: &Args, command: Vec<String>, run_dir: &Path) -> Result<Served, Failure> {
    let terminal = !o.headless
        && o.for_pid.is_none()
        && std::io::stdout().is_terminal()
        && std::io::stdin().is_terminal();
    registry::socket_dir().map_err(failed("cannot serve the dashboard"))?;
    let metrics = MetricsWriter::create(run_dir).map_err(input)?;
    let (records_tx, records_rx) = unbounded();
    let (monitor_tx, monitor_rx) = unbounded();
    let (devices_tx, devices_rx) = unbounded();
    let (controls_tx, controls_rx) = unbounded();
    let (greeting, greeted) = bounded(1);
    let recorder = spawn_recorder(records_rx, monitor_rx, metrics, super::tensorboard(run_dir))
        .map_err(failed("cannot start the recorder"))?;
    let first = vec![super::PRINTER_BUFFER; 1 + usize::from(o.notify.is_some())];
    let (hub, mut subscriptions, hub_thread) =
        Hub::spawn(History::default(), recorder.records, recorder.readings, &first)
            .map_err(failed("cannot start the hub"))?;
    let (_, printed) = subscriptions.remove(0);
    // --notify: the alerts of the run, off the script's path.
    let notifier = match (&o.notify, subscriptions.pop()) {
        (Some(command), Some((_, live))) => Some(
            dpt_tui::alert::spawn_notifier(
                command.clone(),
                run_dir.to_owned(),
                live.into_iter().filter_map(HubMsg::record),
            )
            .map_err(failed("cannot start the notifier"))?,
        ),
        _ => None,
    };
    let served =
        server::serve(run_dir, hub.clone(), controls_tx).map_err(failed("cannot serve the dashboard"))?;
    drop(hub);
    let endpoint = match &o.endpoint {
        Some(e) => e.clone(),
        None => backend::endpoint_for(run_dir).map_err(failed("cannot place the script's socket"))?,
    };
    let backend = backend::spawn(Setup {
        endpoint: endpoint.clone(),
        run_dir: run_dir.to_owned(),
        command: command.clone(),
        records: records_tx,
        controls: controls_rx,
        devices: devices_tx,
        greeting,
        ends_with_ranks: o.for_pid.is_some(),
    })
    .map_err(failed("cannot open the script's socket"))?;
    let (stop_monitor, monitor_stop) = bounded::<()>(0);
    let output = monitor_tx.clone();
    let monitor =
        monitor::script::spawn(devices_rx, Duration::from_millis(args.sample_ms), monitor_tx, monitor_stop)
            .map_err(failed("cannot start the device monitor"))?;
    let child = match command.split_first() {
        Some((program, rest)) => {
            let started =
                start(program, rest, (&endpoint, run_dir), terminal, backend.events.clone(), output);
            match started {
                Ok(c) => Some(c),
                Err(e) => {
                    let _ = backend.events.send(Event::Exited { status: "not started".into(), ok: false });
                    let _ = backend.thread.join();
                    served.withdraw();
                    return Err(input(anyhow!("cannot start {program}: {e}")));
                }
            }
        }
        None => None,
    };
    let group = child.as_ref().map(|c| c.id);
    let watch = watch_signals(args)?;
    // The dashboard opens once the script has said hello: a script that ends before then
    // gets its one line, not a screen with nothing to show.
    let mut ended = None;
    if terminal {
        ended = child.as_ref().and_then(|c| wait_for_hello(&greeted, c, &watch.messages));
        match ended {
            None => view(run_dir, args, &watch.messages, group)?,
            // What it said went to output.log only: say it here, the directory may go.
            Some(_) => replay_output(run_dir),
        }
    } else {
        print(&printed, &watch.messages, group);
    }
    let status = match ended {
        Some(status) => status,
        None => child.and_then(Script::wait),
    };
    let outcome = backend.thread.join().unwrap_or_default();
    drop(stop_monitor);
    let _ = monitor.join();
    let write_error = recorder.thread.join().ok().flatten();
    let _ = hub_thread.join();
    if let Some(n) = notifier {
        // The last alert (the finish) is started before dpt-tui exits.
        let _ = n.join();
    }
    served.withdraw();
    if let Some(e) = write_error {
        eprintln!("dpt-tui: warning: the run's record was not fully written ({e})");
    }
    Ok(Served { status, greeted: outcome.greeted })
}

/// Waits until the script's first rank says hello (`None`) or the script ends first (its exit
/// status); SIGINT and SIGTERM are passed on meanwhile.
fn wait_for_hello(
    greeted: &Receiver<()>,
    script: &Script,
    signals: &Receiver<SignalMsg>,
) -> Option<Option<ExitStatus>> {
    let mut signals = signals.clone();
    loop {
        select! {
            recv(greeted) -> g => match g {
                Ok(()) => return None,
                // The backend ended without a hello: the script has ended, or is ending.
                Err(_) => return Some(script.status.recv().ok().flatten()),
            },
            recv(script.status) -> status => return Some(status.ok().flatten()),
            recv(signals) -> sig => match sig {
                Ok(SignalMsg::Stop(n) | SignalMsg::Preempt(n)) => pass_on(Some(script.id), n),
                Ok(SignalMsg::Hangup) => {}
                Err(_) => signals = crossbeam_channel::never(),
            },
        }
    }
}

/// The last lines of the script's output, on stderr (at most [`REPLAYED_LINES`]).
fn replay_output(run_dir: &Path) {
    let text = std::fs::read_to_string(run_dir.join(OUTPUT_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut err = std::io::stderr();
    for line in &lines[lines.len().saturating_sub(REPLAYED_LINES)..] {
        let _ = writeln!(err, "{line}");
    }
}

/// Prints the run's records until it ends; SIGINT and SIGTERM are passed on to the script.
fn print(printed: &Receiver<HubMsg>, signals: &Receiver<SignalMsg>, group: Option<u32>) {
    let mut printer = HeadlessPrinter::default();
    let mut out = std::io::stdout();
    let mut signals = signals.clone();
    loop {
        select! {
            recv(printed) -> msg => match msg {
                Ok(HubMsg::Record(r)) => printer.print(&r, &mut out),
                Ok(HubMsg::Monitor(_)) => {}
                Err(_) => return,
            },
            recv(signals) -> sig => match sig {
                Ok(SignalMsg::Stop(n) | SignalMsg::Preempt(n)) => pass_on(group, n),
                Ok(SignalMsg::Hangup) => {}
                Err(_) => signals = crossbeam_channel::never(),
            },
        }
    }
}

fn pass_on(group: Option<u32>, signal: i32) {
    if let Some(g) = group {
        let _ = dpt_tui::sys::signal_process_group(g, signal);
    }
}

/// The dashboard on the run, from this process; closing it leaves the script running until it
/// ends (a signal still reaches it).
fn view(
    run_dir: &Path,
    args: &Args,
    signals: &Receiver<SignalMsg>,
    group: Option<u32>,
) -> Result<(), Failure> {
    let theme = theme(args)?;
    let attached = client::attach(run_dir, false).map_err(|e| Failure::Run(e.into()))?;
    let source = dashboard::Source::job(attached, run_dir, false);
    let end = dashboard::run(source, signals, dashboard_options(args, theme))
        .map_err(failed("the dashboard failed"))?;
    if let Some(n) = end.interrupted {
        pass_on(group, n);
    }
    if let Some(summary) = &end.app.run.summary {
        HeadlessPrinter::default().print(&Record::Summary(Box::new(summary.clone())), &mut std::io::stdout());
    }
    if let Some(message) = &end.app.run.failure {
        HeadlessPrinter::default().print(
            &Record::Event(Change::Failed { replica: None, device: None, message: message.clone() }),
            &mut std::io::stderr(),
        );
    }
    if !end.app.run.state.is_over() && client::is_live(run_dir) {
        println!(
            "the dashboard closed; the script goes on (dpt-tui attach {} reopens it)",
            run_dir.display()
        );
    }
    Ok(())
}

/// The run's name: the script's file name (`train.py` → `train`), else the program's.
fn label(command: &[String]) -> String {
    let script = command.iter().find(|a| a.ends_with(".py")).or(command.first());
    script
        .and_then(|s| Path::new(s).file_stem())
        .map_or_else(|| "script".to_owned(), |s| s.to_string_lossy().into_owned())
}
