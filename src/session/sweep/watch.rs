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

use super::{read_state, sweep_runs};
use crate::cli::Args;
use crate::Failure;
use dpt_core::best::BestMetric;
use dpt_core::Control;
use dpt_tui::dashboard;
use dpt_tui::record::curves::Curves;
use dpt_tui::record::run::RunFollower;
use dpt_tui::remote::client;
use dpt_tui::sweep::{short_key, SweepFile, TrialState, SWEEP_LOG};
use dpt_tui::sweep_board::board::{Action, Board, SweepData, TrialRow};
use dpt_tui::sweep_board::{self, Exit};

/// How often the board reads the sweep again.
const REFRESH: Duration = Duration::from_millis(500);

/// One trial's records so far: the run's fold, and its curves for the board's chart.
struct Followed {
    run: RunFollower,
    curves: Curves,
    /// The trial process seen serving its socket: it is not asked again at every refresh.
    served_by: Option<u32>,
}

impl Followed {
    fn of(dir: &Path) -> Followed {
        Followed { run: RunFollower::of(dir), curves: Curves::default(), served_by: None }
    }

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

    fn read(&mut self) {
        let fresh = self.run.read();
        if fresh.restarted {
            self.curves = Curves::default();
        }
        for record in &fresh.records {
            self.curves.apply(record);
        }
    }

    /// The seconds left at the pace of its epochs so far (training and evaluation).
    fn eta(&self) -> Option<f64> {
        let done = &self.run.fold.epochs;
        let each =
            done.iter().map(|e| e.epoch_seconds + e.eval_seconds).sum::<f64>() / done.len().max(1) as f64;
        (!done.is_empty()).then(|| each * (self.curves.epochs as f64 - self.curves.x).max(0.0))
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
        let log = std::fs::metadata(folder.join(SWEEP_LOG)).map_or(0, |m| m.len() as usize);
        let log_from = if just_started { log } else { 0 };
        Follower { folder: folder.to_owned(), shown: shown.to_owned(), trials: HashMap::new(), log_from }
    }

    /// The sweep as it is now; none while its `sweep.json` cannot be read.
    pub fn read(&mut self) -> Option<SweepData> {
        let file = SweepFile::read(&self.folder).ok().flatten()?;
        let axes: Vec<String> = file.axes.iter().map(|a| short_key(&a.key).to_owned()).collect();
        let mut metric = None;
        let mut rows = Vec::new();
        for t in &file.trials {
            let dir = self.folder.join(&t.dir);
            let followed = self.trials.entry(t.dir.clone()).or_insert_with(|| Followed::of(&dir));
            if t.state != TrialState::Pending {
                followed.read();
            }
            let fold = &followed.run.fold;
            // The sweep's metric is its first started trial's (they share it unless it is swept).
            if metric.is_none() && fold.info.is_some() {
                metric = Some(fold.metric());
            }
            let judged = metric.unwrap_or_default();
            let c = &followed.curves;
            let curve = match judged {
                BestMetric::ValAcc => c.test_acc.clone(),
                BestMetric::ValLoss => c.test_loss.clone(),
            };
            rows.push(TrialRow {
                dir: t.dir.clone(),
                values: t.values.clone(),
                state: t.state,
                reason: t.reason.clone(),
                epoch: c.x,
                epochs: c.epochs,
                latest: curve.last().map(|p| p.1),
                best: judged.best_of(fold.values(judged)),
                eta: followed.eta().filter(|_| t.state == TrialState::Running),
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
            seed_axis: file.seed_axis(),
            metric: metric.unwrap_or_default(),
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
        let text = std::fs::read_to_string(self.folder.join(SWEEP_LOG)).ok()?;
        dpt_tui::said_error(text.get(self.log_from..)?).map(str::to_owned)
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
            let file = read_state(folder).ok().flatten();
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

/// How the board comes to its sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The sweep's process was started for this board: an error in `sweep.log` from before it
    /// is an earlier attempt's, not this one's.
    Started,
    /// `dpt-tui attach SWEEP` on a sweep that runs (or ran) already, with the right to steer it
    /// or without.
    Attached { read_only: bool },
}

/// The board on the sweep in `folder` until it closes, with each trial opened from it in
/// between; the exit status.
pub fn watch(folder: &Path, shown: &str, opening: Opening, args: &Args) -> Result<u8, Failure> {
    let read_only = opening == Opening::Attached { read_only: true };
    let just_started = opening == Opening::Started;
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
                } else if let Ok(Some(file)) = read_state(folder) {
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
