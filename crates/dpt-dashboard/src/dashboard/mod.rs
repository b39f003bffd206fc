//! The live dashboard: a ratatui + crossterm full-screen view over the engine's event stream.
//!
//! The UI thread owns all state ([`app::App`]). It waits on one crossbeam `select!` over the
//! engine's events, the keyboard (a `dpt-input` thread), the device monitor (`dpt-monitor`) and
//! a frame ticker, and redraws on a tick only when something changed, so the event rate and the
//! frame rate are independent and an idle dashboard costs nothing but the wake-ups.

pub mod app;
mod bindings;
pub mod compare;
pub mod curves;
pub mod devices;
mod keys;
pub mod log;
pub mod panels;
pub mod rewind;
pub mod terminal;
pub mod theme;
pub mod view;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, select, tick, unbounded, Receiver, Sender};
use crossterm::event::{self, Event as TermEvent};
use thiserror::Error;

pub use keys::{help, KEYS};

use crate::monitor::MonitorMsg;
use crate::remote::protocol::Snapshot;
use crate::signals::SignalMsg;
use crate::{record::Record, unix_now, Control};
use app::App;
use theme::Theme;
use view::Look;

/// A failure of the terminal itself.
#[derive(Debug, Error)]
pub enum DashboardError {
    #[error("terminal error: {0}")]
    Io(#[from] std::io::Error),
    #[error("a thread of dpt-tui panicked (its message is above)")]
    Panicked,
}

/// How the dashboard looks and samples.
#[derive(Debug, Clone)]
pub struct Options {
    pub theme: Theme,
    pub ascii: bool,
    /// Most frames per second.
    pub fps: u32,
    /// Device sampling period.
    pub sample: Duration,
    /// Ring the terminal bell on alerts (finish, failure, non-finite loss, straggler).
    pub bell: bool,
}

/// Whether the locale promises UTF-8 (else the ASCII rendering is used).
pub fn locale_is_utf8() -> bool {
    for var in ["LC_ALL", "LC_CTYPE", "LANG"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() {
                let v = v.to_ascii_uppercase();
                return v.contains("UTF-8") || v.contains("UTF8");
            }
        }
    }
    false
}

/// The terminal's input, read on a thread of its own (polled, so that it notices when it is no
/// longer wanted). Dropped, the thread is stopped and waited for, so that the next screen's
/// reader is the only one; but not for long: on a terminal that went away, crossterm's reader
/// keeps reading the end of the file without returning (its loop waits for `WouldBlock` only),
/// and the process must still be able to leave.
pub(crate) struct Input {
    pub events: Receiver<TermEvent>,
    stop: Arc<AtomicBool>,
    /// Disconnected when the thread ends.
    ended: Receiver<()>,
}

/// How long dropping an [`Input`] waits for its thread: a poll's period and some.
const INPUT_STOP: Duration = Duration::from_millis(500);

impl Input {
    pub(crate) fn spawn() -> std::io::Result<Input> {
        let (tx, events) = unbounded();
        let (alive, ended) = crossbeam_channel::bounded::<()>(0);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::Builder::new().name("dpt-input".into()).spawn(move || {
            let _alive = alive;
            while !flag.load(Ordering::Relaxed) {
                // Poll with a timeout so the thread notices `stop` without a key press.
                match event::poll(Duration::from_millis(100)) {
                    Ok(true) => match event::read() {
                        Ok(ev) => {
                            if tx.send(ev).is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    },
                    Ok(false) => {}
                    Err(_) => return,
                }
            }
        })?;
        Ok(Input { events, stop, ended })
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Returns when the thread ends (its sender dropped), or after INPUT_STOP.
        let _ = self.ended.recv_timeout(INPUT_STOP);
    }
}

/// Where the dashboard's data comes from: a job (attached over its socket) or a recorded run.
pub struct Source {
    /// The run so far, replayed before the live data.
    pub snapshot: Snapshot,
    pub records: Receiver<Record>,
    pub monitor: Receiver<MonitorMsg>,
    /// Where controls go; `None` for a viewer that may not steer (`--read-only`, `show`).
    pub controls: Option<Sender<Control>>,
    /// A live job in another process (`d` detaches from it).
    pub attached: bool,
    /// Opened from a sweep's board: Esc goes back to it (the job goes on).
    pub returns: bool,
    /// The run's directory: its neighbours are the runs `b` offers as baselines.
    pub run_dir: Option<std::path::PathBuf>,
    /// Recorded runs drawn under this one from the start (`dpt-tui show A B`).
    pub baselines: Vec<crate::record::compare::Baseline>,
}

impl Source {
    /// The job of `run_dir` as `attached` over its socket, steerable unless `read_only`.
    pub fn job(
        attached: crate::remote::client::Attached,
        run_dir: &std::path::Path,
        read_only: bool,
    ) -> Source {
        Source {
            snapshot: attached.snapshot,
            records: attached.records,
            monitor: attached.monitor,
            controls: (!read_only).then_some(attached.controls),
            attached: true,
            returns: false,
            run_dir: Some(run_dir.to_owned()),
            baselines: Vec::new(),
        }
    }
}

/// How the dashboard ended.
pub struct End {
    /// The final state, whose summary or failure the caller prints after the screen is restored.
    pub app: App,
    /// The terminal went away (SIGHUP, or input closed).
    pub hangup: bool,
    /// SIGINT or SIGTERM asked for a stop (the signal number).
    pub interrupted: Option<i32>,
}

/// The terminal bell (BEL): the terminal beeps, flashes or marks the tab, as its user set it.
fn ring_bell() {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = out.write_all(b"\x07").and_then(|()| out.flush());
}

/// Runs the dashboard until the user leaves (after the run ends, after a confirmed stop, or by
/// detaching), or the terminal goes away.
pub fn run(source: Source, signals: &Receiver<SignalMsg>, opts: Options) -> Result<End, DashboardError> {
    let mut app = App::new(&[]);
    app.viewer.steerable = source.controls.is_some();
    app.viewer.attached = source.attached;
    app.viewer.returns = source.returns;
    app.curves.run_dir = source.run_dir.clone();
    app.curves.baselines = source.baselines.clone();
    // What happened before this viewer came is history: it rings no bell.
    let mut alerts = crate::alert::Alerts::default();
    for record in &source.snapshot.records {
        let _ = alerts.on_record(record);
        app.on_event(record);
    }
    for msg in &source.snapshot.monitor {
        app.on_monitor(msg);
    }
    let controls = source.controls;
    let send = |c: Control| {
        if let Some(tx) = &controls {
            // The job may have finished; a control then has nobody to reach.
            let _ = tx.send(c);
        }
    };
    let mut tui = terminal::Tui::enter()?;
    let terminal_input = Input::spawn()?;
    let input = terminal_input.events.clone();
    let look = Look { theme: &opts.theme, ascii: opts.ascii };
    let ticker = tick(Duration::from_millis(1000 / u64::from(opts.fps.clamp(1, 60))));
    let (mut events, mut monitor_rx, mut signals) = (source.records, source.monitor, signals.clone());
    let (mut hangup, mut interrupted) = (false, None);
    let result = loop {
        select! {
            recv(signals) -> sig => match sig {
                // Opened from a sweep's board, the signal is the board's: it leaves, and the
                // trial goes on for the sweep to stop as it stops its trials.
                Ok(SignalMsg::Stop(number) | SignalMsg::Preempt(number)) if app.viewer.returns => {
                    interrupted = Some(number);
                    app.viewer.detached = !app.run.state.is_over();
                    app.viewer.quit = true;
                }
                Ok(msg @ (SignalMsg::Stop(number) | SignalMsg::Preempt(number))) => {
                    interrupted = Some(number);
                    app.viewer.stop_requested = true;
                    if app.run.state.is_over() || !app.viewer.steerable {
                        app.viewer.quit = true;
                    }
                    send(if matches!(msg, SignalMsg::Preempt(_)) { Control::Preempt } else { Control::Stop });
                }
                Ok(SignalMsg::Hangup) => {
                    hangup = true;
                    break Ok(());
                }
                Err(_) => signals = never(),
            },
            recv(events) -> ev => match ev {
                Ok(ev) => {
                    if alerts.on_record(&ev).is_some() && opts.bell {
                        ring_bell();
                    }
                    app.on_event(&ev)
                }
                Err(_) => {
                    if app.viewer.attached {
                        app.on_disconnected();
                    }
                    events = never();
                }
            },
            recv(input) -> ev => match ev {
                Ok(TermEvent::Key(key)) => {
                    for control in app.on_key(key) {
                        send(control);
                    }
                }
                Ok(TermEvent::Resize(..)) => app.dirty = true,
                Ok(_) => {}
                // The terminal is gone (SSH dropped): nothing to draw on; training goes on.
                Err(_) => {
                    hangup = true;
                    break Ok(());
                }
            },
            recv(monitor_rx) -> msg => match msg {
                Ok(msg) => app.on_monitor(&msg),
                Err(_) => monitor_rx = never(),
            },
            recv(ticker) -> _ => {
                if terminal::panicked() {
                    break Err(DashboardError::Panicked);
                }
                if let Some(t0) = app.run.info.as_ref().and_then(|i| i.started_unix) {
                    app.tick(unix_now() - t0);
                }
                if app.dirty {
                    app.dirty = false;
                    if let Err(e) = tui.terminal.draw(|f| view::draw(f, &app, &look)) {
                        break Err(e.into());
                    }
                }
            },
        }
        if let Some(control) = app.hold() {
            send(control);
        }
        if app.viewer.quit {
            break Ok(());
        }
    };
    // Leaving with the dialog open (the terminal gone) lets the run go; the job's server would
    // also take the hold back once the connection closes.
    if app.viewer.holding {
        send(Control::Hold { on: false });
    }
    drop(terminal_input);
    drop(tui);
    result.map(|()| End { app, hangup, interrupted })
}
