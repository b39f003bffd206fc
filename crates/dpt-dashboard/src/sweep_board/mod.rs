//! The sweep board (`dpt-tui attach SWEEP`, and a sweep started with a terminal): one table of
//! the sweep's trials, refreshed as their records grow, sortable, with the best trial's curve
//! and the seed groups; Enter leaves the board for a trial's own dashboard (its owner opens it
//! and comes back), and the keys that stop a trial, stop the sweep or set a trial's lr are
//! carried out by its owner, which says how it went.

mod bindings;
pub mod board;
mod view;

use std::time::Duration;

use crossbeam_channel::{never, select, tick, Receiver};
use crossterm::event::Event as TermEvent;

use crate::dashboard::view::Look;
use crate::dashboard::{terminal, DashboardError, Input, Options};
use crate::signals::SignalMsg;
use board::{Action, Board, SweepData};

/// Why the board closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The user closed it; the sweep goes on.
    Quit,
    /// Enter on a running trial: its dashboard is wanted, then the board again.
    Open(String),
    /// The terminal went away.
    Hangup,
    /// SIGINT or SIGTERM (the signal number).
    Interrupted(i32),
}

/// Shows `board` in the terminal, refreshed with each [`SweepData`] from `data`, until it
/// closes; `act` carries out a stop or an lr and returns what to say of it.
pub fn run(
    board: &mut Board,
    data: &Receiver<SweepData>,
    act: &mut dyn FnMut(&Action) -> Result<String, String>,
    signals: &Receiver<SignalMsg>,
    opts: &Options,
) -> Result<Exit, DashboardError> {
    let mut tui = terminal::Tui::enter()?;
    let input = Input::spawn()?;
    let look = Look { theme: &opts.theme, ascii: opts.ascii };
    let ticker = tick(Duration::from_millis(1000 / u64::from(opts.fps.clamp(1, 60))));
    let (mut data, mut signals) = (data.clone(), signals.clone());
    let mut dirty = true;
    let exit = loop {
        select! {
            recv(signals) -> sig => match sig {
                Ok(SignalMsg::Stop(n) | SignalMsg::Preempt(n)) => break Ok(Exit::Interrupted(n)),
                Ok(SignalMsg::Hangup) => break Ok(Exit::Hangup),
                Err(_) => signals = never(),
            },
            recv(data) -> d => match d {
                Ok(d) => {
                    board.update(d);
                    dirty = true;
                }
                Err(_) => data = never(),
            },
            recv(input.events) -> ev => match ev {
                Ok(TermEvent::Key(key)) => {
                    dirty = true;
                    board.note = None;
                    match board.on_key(key) {
                        Some(Action::Quit) => break Ok(Exit::Quit),
                        Some(Action::Open(dir)) => break Ok(Exit::Open(dir)),
                        Some(action) => board.note = Some(act(&action).unwrap_or_else(|e| e)),
                        None => {}
                    }
                }
                Ok(TermEvent::Resize(..)) => dirty = true,
                Ok(_) => {}
                Err(_) => break Ok(Exit::Hangup),
            },
            recv(ticker) -> _ => {
                if terminal::panicked() {
                    break Err(DashboardError::Panicked);
                }
                if std::mem::take(&mut dirty) {
                    if let Err(e) = tui.terminal.draw(|f| view::draw(f, board, &look)) {
                        break Err(e.into());
                    }
                }
            },
        }
    };
    drop(input);
    drop(tui);
    exit
}
