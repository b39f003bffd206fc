//! The sweep board on a sweep's folder (`dpt-tui attach SWEEP`, and a sweep started with a
//! terminal): `sweep.json` and every trial's records followed twice a second into the board's
//! [`SweepData`]; Enter opens a running trial's own dashboard over its socket, whose Esc comes
//! back to the board; a trial is stopped or its lr set through its socket as its own dashboard
//! does (the sweep then records a stopped trial as stopped, not to be run again), the sweep
//! stopped by SIGTERM to its process, as `kill` does.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use crossbeam_channel::{bounded, Receiver};

use super::progress::Tail;
use super::{read_state, sweep_runs};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::dashboard;
use dpt_tui::engine::Control;
use dpt_tui::record::curves::Curves;
use dpt_tui::record::Record;
use dpt_tui::remote::client;
use dpt_tui::sweep::{short_key, TrialState, SWEEP_FILE};
use dpt_tui::sweep_board::board::{Action, Board, Metric, SweepData, TrialRow};
use dpt_tui::sweep_board::{self, Exit};

/// How often the board reads the sweep again.
const REFRESH: Duration = Duration::from_millis(500);

/// One trial's records so far, folded.
#[derive(Default)]
struct Followed {
    tail: Option<Tail>,
    curves: Curves,
    /// Each epoch's seconds (training and evaluation), by epoch.
    epoch_seconds: Vec<f64>,
}

impl Followed {
    fn read(&mut self, dir: &Path) {
        let tail = self.tail.get_or_insert_with(|| Tail::of(dir));
        for record in tail.read() {
            if let Record::Epoch(e) = &record {
                self.epoch_seconds.truncate(e.epoch.saturating_sub(1));
                self.epoch_seconds.push(e.epoch_seconds + e.eval_seconds);
            }
            self.curves.apply(&record);
        }
    }
}

/// A sweep's folder followed: its state and its trials' records, read as they grow.
pub struct Follower {
    folder: PathBuf,
    shown: String,
    trials: HashMap<String, Followed>,
}

impl Follower {
    pub fn new(folder: &Path, shown: &str) -> Follower {
        Follower { folder: folder.to_owned(), shown: shown.to_owned(), trials: HashMap::new() }
    }

    /// The sweep as it is now; none while its `sweep.json` cannot be read.
    pub fn read(&mut self) -> Option<SweepData> {
        let file = read_state(&self.folder.join(SWEEP_FILE)).ok().flatten()?;
        let axes: Vec<String> = file.axes.iter().map(|a| short_key(&a.key).to_owned()).collect();
        let seed_axis = file.axes.iter().position(|a| a.key == "recipe.seed");
        let mut no_classes = false;
        let mut rows = Vec::new();
        for t in &file.trials {
            let dir = self.folder.join(&t.dir);
            let followed = self.trials.entry(t.dir.clone()).or_default();
            if t.state != TrialState::Pending {
                followed.read(&dir);
            }
            let c = &followed.curves;
            no_classes |= c.no_classes;
            let curve = if c.no_classes { c.test_loss.clone() } else { c.test_acc.clone() };
            let metric = if c.no_classes { Metric::TestLoss } else { Metric::TestAcc };
            let best = curve.iter().map(|p| p.1).filter(|v| v.is_finite()).reduce(|a, b| {
                if metric.better(b, a) {
                    b
                } else {
                    a
                }
            });
            let done = &followed.epoch_seconds;
            let eta = (!done.is_empty() && t.state == TrialState::Running)
                .then(|| done.iter().sum::<f64>() / done.len() as f64 * (c.epochs as f64 - c.x).max(0.0));
            rows.push(TrialRow {
                dir: t.dir.clone(),
                values: t.values.clone(),
                state: t.state,
                reason: t.reason.clone(),
                epoch: c.x,
                epochs: c.epochs,
                latest: curve.last().map(|p| p.1),
                best,
                eta,
                curve,
                live: t.state == TrialState::Running && client::is_live(&dir),
            });
        }
        Some(SweepData {
            folder: self.shown.clone(),
            axes,
            seed_axis,
            metric: if no_classes { Metric::TestLoss } else { Metric::TestAcc },
            trials: rows,
            running: file.pid.is_some_and(sweep_runs),
        })
    }
}

/// The sweep's data, read every [`REFRESH`] on a thread of its own until the receiver goes.
fn feed(folder: &Path, shown: &str) -> Result<Receiver<SweepData>, Failure> {
    let (tx, rx) = bounded(1);
    let mut follower = Follower::new(folder, shown);
    std::thread::Builder::new()
        .name("dpt-sweep-feed".into())
        .spawn(move || loop {
            if let Some(data) = follower.read() {
                // The board takes the newest; a full channel holds one it has not read yet.
                if let Err(crossbeam_channel::TrySendError::Disconnected(_)) = tx.try_send(data) {
                    return;
                }
            }
            std::thread::sleep(REFRESH);
        })
        .map_err(|e| Failure::Run(anyhow!("cannot start the sweep's reader: {e}")))?;
    Ok(rx)
}

/// Carries out a stop or an lr from the board; what to say of it.
fn act(folder: &Path, action: &Action) -> Result<String, String> {
    let control = |dir: &str, control: Control| -> Result<(), String> {
        let attached = client::attach(&folder.join(dir), false).map_err(|e| format!("{dir}: {e}"))?;
        attached.controls.send(control).map_err(|_| format!("{dir}: its connection closed"))
    };
    match action {
        Action::StopTrial(dir) => {
            control(dir, Control::Stop)?;
            Ok(format!("{dir} stops after its step, with a checkpoint; its place goes to the next trial"))
        }
        Action::SetLr(dir, lr) => {
            control(dir, Control::SetLr { lr: *lr })?;
            Ok(format!("{dir}: lr {lr} from its next step"))
        }
        Action::StopSweep => {
            let file = read_state(&folder.join(SWEEP_FILE)).ok().flatten();
            let pid =
                file.and_then(|f| f.pid).filter(|&p| sweep_runs(p)).ok_or("no sweep process runs it now")?;
            dpt_tui::sys::terminate_process(pid).map_err(|e| format!("cannot stop process {pid}: {e}"))?;
            Ok(format!(
                "the sweep (pid {pid}) stops: its running trials checkpoint; the same command continues it"
            ))
        }
        Action::Open(_) | Action::Quit => Ok(String::new()),
    }
}

/// The board on the sweep in `folder` until it closes, with each trial opened from it in
/// between; the exit status.
pub fn watch(folder: &Path, shown: &str, read_only: bool, args: &Args) -> Result<u8, Failure> {
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !terminal {
        return Err(super::input(anyhow!(
            "the sweep board needs a terminal; 'dpt-tui show {shown}' prints its table, 'dpt-tui attach {shown}/trial-NNN' opens a running trial"
        )));
    }
    let theme = super::super::theme(args)?;
    let options = super::super::dashboard_options(args, theme.clone());
    let signals = super::super::watch_signals(args)?;
    let data = feed(folder, shown)?;
    let mut board = Board::default();
    let mut act = |a: &Action| {
        if read_only {
            return Err("read-only (attach without --read-only to stop or steer)".to_owned());
        }
        act(folder, a)
    };
    loop {
        let exit = sweep_board::run(&mut board, &data, &mut act, &signals.messages, &options)
            .map_err(|e| Failure::Run(anyhow!("the sweep board failed: {e}")))?;
        match exit {
            Exit::Open(dir) => {
                if let Err(e) = open_trial(&folder.join(&dir), read_only, &signals.messages, &options) {
                    board.note = Some(format!("{dir}: {e}"));
                }
            }
            Exit::Quit | Exit::Hangup => {
                if board.data().running {
                    println!("the sweep goes on; its board again: dpt-tui attach {shown}");
                } else if let Ok(Some(file)) = read_state(&folder.join(SWEEP_FILE)) {
                    println!("{}", super::table::text(folder, &file));
                }
                return Ok(0);
            }
            Exit::Interrupted(signal) => return Ok(dpt_tui::signals::exit_code(signal)),
        }
    }
}

/// A trial's own dashboard, opened from the board: Esc comes back, the trial going on.
fn open_trial(
    dir: &Path,
    read_only: bool,
    signals: &Receiver<dpt_tui::signals::SignalMsg>,
    options: &dashboard::Options,
) -> Result<(), String> {
    let attached = client::attach(dir, read_only).map_err(|e| e.to_string())?;
    let source = dashboard::Source {
        snapshot: attached.snapshot,
        records: attached.records,
        monitor: attached.monitor,
        controls: (!read_only).then_some(attached.controls),
        attached: true,
        returns: true,
        run_dir: Some(dir.to_owned()),
        baselines: Vec::new(),
    };
    dashboard::run(source, signals, options.clone()).map(|_| ()).map_err(|e| e.to_string())
}
