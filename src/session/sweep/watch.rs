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
use dpt_core::Control;
use dpt_tui::dashboard;
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
    /// The trial process seen serving its socket: it is not asked again at every refresh.
    served_by: Option<u32>,
}

impl Followed {
    /// Whether the running trial's process `pid` serves its dashboard: asked of its socket
    /// until it answers once.
    fn live(&mut self, dir: &Path, pid: Option<u32>) -> bool {
        if pid.is_some() && self.served_by == pid {
            return true;
        }
        let live = client::is_live(dir);
        self.served_by = if live { pid } else { None };
        live
    }
}

impl Followed {
    fn read(&mut self, dir: &Path) {
        let read = self.tail.get_or_insert_with(|| Tail::of(dir)).read();
        if read.restarted {
            (self.curves, self.epoch_seconds) = (Curves::default(), Vec::new());
        }
        for record in read.records {
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
    /// The bytes of `sweep.log` written before this board's sweep process started (none when
    /// the board opens on a sweep started earlier): an error there is an earlier attempt's.
    log_from: usize,
}

impl Follower {
    /// The sweep in `folder`; `just_started` when its sweep process was started for this board.
    pub fn new(folder: &Path, shown: &str, just_started: bool) -> Follower {
        let log = std::fs::metadata(folder.join("sweep.log")).map_or(0, |m| m.len() as usize);
        let log_from = if just_started { log } else { 0 };
        Follower { folder: folder.to_owned(), shown: shown.to_owned(), trials: HashMap::new(), log_from }
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
                live: t.state == TrialState::Running && followed.live(&dir, t.pid),
            });
        }
        let running = file.pid.is_some_and(sweep_runs);
        let unsettled = file.trials.iter().any(|t| !t.state.is_settled());
        let problem = (!running && unsettled).then(|| self.last_error()).flatten();
        Some(SweepData {
            folder: self.shown.clone(),
            axes,
            seed_axis,
            metric: if no_classes { Metric::TestLoss } else { Metric::TestAcc },
            trials: rows,
            running,
            problem,
        })
    }
}

impl Follower {
    /// The last error line the sweep process wrote (its `dpt-tui: …` line) since this board's
    /// sweep started.
    fn last_error(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.folder.join("sweep.log")).ok()?;
        let ours = text.get(self.log_from..)?;
        ours.lines().rev().find_map(|l| l.strip_prefix("dpt-tui: ")).map(str::to_owned)
    }
}

/// The sweep's data, read every [`REFRESH`] on a thread of its own until the receiver goes.
fn feed(folder: &Path, shown: &str, just_started: bool) -> Result<Receiver<SweepData>, Failure> {
    let (tx, rx) = bounded(1);
    let mut follower = Follower::new(folder, shown, just_started);
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
/// between (`just_started`: its sweep process was started for it); the exit status.
pub fn watch(
    folder: &Path,
    shown: &str,
    read_only: bool,
    just_started: bool,
    args: &Args,
) -> Result<u8, Failure> {
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !terminal {
        return Err(super::input(anyhow!(
            "the sweep board needs a terminal; 'dpt-tui show {shown}' prints its table, 'dpt-tui attach {shown}/trial-NNN' opens a running trial"
        )));
    }
    let theme = super::super::theme(args)?;
    let options = super::super::dashboard_options(args, theme.clone());
    let signals = super::super::watch_signals(args)?;
    let data = feed(folder, shown, just_started)?;
    let mut board = if read_only { Board::read_only() } else { Board::default() };
    let mut act = |a: &Action| act(folder, a);
    loop {
        let exit = sweep_board::run(&mut board, &data, &mut act, &signals.messages, &options)
            .map_err(|e| Failure::Run(anyhow!("the sweep board failed: {e}")))?;
        match exit {
            Exit::Open(dir) => match open_trial(&folder.join(&dir), read_only, &signals.messages, &options) {
                Ok(end) if end.hangup => return Ok(0),
                Ok(end) => {
                    if let Some(signal) = end.interrupted {
                        return Ok(dpt_tui::signals::exit_code(signal));
                    }
                }
                Err(e) => board.note = Some(format!("{dir}: {e}")),
            },
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

/// A trial's own dashboard, opened from the board: Esc comes back, the trial going on. How it
/// ended (the terminal gone, a signal) is the board's too.
fn open_trial(
    dir: &Path,
    read_only: bool,
    signals: &Receiver<dpt_tui::signals::SignalMsg>,
    options: &dashboard::Options,
) -> Result<dashboard::End, String> {
    let attached = client::attach(dir, read_only).map_err(|e| e.to_string())?;
    let source = dashboard::Source { returns: true, ..dashboard::Source::job(attached, dir, read_only) };
    dashboard::run(source, signals, options.clone()).map_err(|e| e.to_string())
}
