//! The dashboard's state, owned by the UI thread and changed only by engine events, monitor
//! samples, keys and the clock. Drawing reads it; nothing here draws or touches a tensor.

use crate::engine::events::{EpochStats, Event, RunInfo, StepStats, Summary};
use crate::engine::DeviceId;
use crate::headless::thousands;
use crate::monitor::MonitorMsg;

use super::curves::{CurveView, Curves, MarkKind};
use super::devices::{panels, DeviceState};
use super::log::{EventLog, Level};

/// The run as the status line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Starting,
    Running,
    Paused,
    Stopping,
    Finished,
    Failed,
    /// The connection to the job closed before its final event (the job may still run).
    Disconnected,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Starting => "STARTING",
            RunState::Running => "RUNNING",
            RunState::Paused => "PAUSED",
            RunState::Stopping => "STOPPING",
            RunState::Finished => "FINISHED",
            RunState::Failed => "FAILED",
            RunState::Disconnected => "DISCONNECTED",
        }
    }

    /// Whether training is over (keys that steer it no longer apply).
    pub fn is_over(self) -> bool {
        matches!(self, RunState::Finished | RunState::Failed | RunState::Disconnected)
    }
}

/// A window over the rest of the screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    Help,
    /// The exact-lr prompt: what was typed and why the last entry was refused.
    LrPrompt {
        input: String,
        error: Option<String>,
    },
    ConfirmQuit,
}

/// How the curve panel is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveSettings {
    pub view: CurveView,
    /// Show only the last this many epochs (`None`: the whole run).
    pub recent: Option<f64>,
    pub log_loss: bool,
}

/// Everything the dashboard shows.
#[derive(Debug, Clone)]
pub struct App {
    pub info: Option<RunInfo>,
    pub state: RunState,
    pub curves: Curves,
    pub settings: CurveSettings,
    pub last_step: Option<StepStats>,
    pub last_epoch: Option<EpochStats>,
    pub epoch_seconds: Vec<f64>,
    pub lr: Option<f64>,
    pub global_step: usize,
    pub devices: Vec<DeviceState>,
    pub nvml_note: Option<String>,
    pub log: EventLog,
    pub overlay: Option<Overlay>,
    pub summary: Option<Summary>,
    pub failure: Option<String>,
    /// Seconds since training started, pauses included (set by [`App::tick`]).
    pub elapsed: f64,
    /// The factor `+` and `-` apply to the lr.
    pub lr_factor: f64,
    /// The user asked to stop; leave once the run has finished.
    pub stop_requested: bool,
    /// Leave the dashboard now.
    pub quit: bool,
    /// The user detached: the dashboard closes, training goes on.
    pub detached: bool,
    /// This viewer may steer the run (not `--read-only`, not `show`).
    pub steerable: bool,
    /// Attached to a job in another process (so `d` can detach).
    pub attached: bool,
    /// Something changed since the last frame.
    pub dirty: bool,
    /// Wall-clock time for log lines, `HH:MM:SS` (tests fix it).
    pub clock: fn() -> String,
}

/// `cpu` or `cuda:N`, as events name devices.
fn parse_device(s: &str) -> Option<DeviceId> {
    match s.strip_prefix("cuda:") {
        Some(n) => n.parse().ok().map(DeviceId::Cuda),
        None => (s == "cpu").then_some(DeviceId::Cpu),
    }
}

fn wall_clock() -> String {
    chrono::Local::now().format("%H:%M:%S").to_string()
}

impl App {
    pub fn new(devices: &[DeviceId]) -> Self {
        App {
            info: None,
            state: RunState::Starting,
            curves: Curves::default(),
            settings: CurveSettings { view: CurveView::Loss, recent: None, log_loss: false },
            last_step: None,
            last_epoch: None,
            epoch_seconds: Vec::new(),
            lr: None,
            global_step: 0,
            devices: panels(devices),
            nvml_note: None,
            log: EventLog::default(),
            overlay: None,
            summary: None,
            failure: None,
            elapsed: 0.0,
            lr_factor: 2.0,
            stop_requested: false,
            quit: false,
            detached: false,
            steerable: true,
            attached: false,
            dirty: true,
            clock: wall_clock,
        }
    }

    fn note(&mut self, level: Level, text: impl Into<String>) {
        let time = (self.clock)();
        self.log.push(time, level, text);
    }

    /// Applies one engine event.
    pub fn on_event(&mut self, event: &Event) {
        self.dirty = true;
        match event {
            Event::Started(info) => {
                self.state = RunState::Running;
                self.lr = Some(info.lr);
                self.note(
                    Level::Info,
                    format!(
                        "started {} ({} parameters) on [{}]",
                        info.model,
                        thousands(info.param_count),
                        info.devices.join(", ")
                    ),
                );
                if self.devices.is_empty() {
                    let ids: Vec<DeviceId> = info.devices.iter().filter_map(|d| parse_device(d)).collect();
                    self.devices = panels(&ids);
                }
                self.info = Some((**info).clone());
            }
            Event::Step(s) => {
                self.curves.on_step(s);
                for d in &mut self.devices {
                    d.on_step(s);
                }
                self.global_step = s.global_step;
                self.last_step = Some((**s).clone());
            }
            Event::Epoch(e) => {
                self.curves.on_epoch(e);
                self.epoch_seconds.push(e.epoch_seconds);
                self.note(
                    Level::Info,
                    format!(
                        "epoch {}: train loss {:.4}, train acc {:.3}, test acc {:.3}, {:.1} s",
                        e.epoch, e.train_loss, e.train_acc, e.test_acc, e.epoch_seconds
                    ),
                );
                self.last_epoch = Some((**e).clone());
            }
            Event::LrChanged { from, to, global_step } => {
                self.lr = Some(*to);
                self.curves.mark(MarkKind::LrChange);
                self.curves.on_lr(*to);
                self.note(Level::Info, format!("lr {from} -> {to} at step {global_step}"));
            }
            Event::Paused { global_step } => {
                self.state = RunState::Paused;
                self.curves.mark(MarkKind::Pause);
                self.note(Level::Info, format!("paused at step {global_step}"));
            }
            Event::Resumed { global_step } => {
                if self.state == RunState::Paused {
                    self.state = RunState::Running;
                }
                self.note(Level::Info, format!("resumed at step {global_step}"));
            }
            Event::StopRequested { global_step } => {
                self.state = RunState::Stopping;
                self.note(Level::Info, format!("stopping after step {global_step}"));
            }
            Event::Saved { path, global_step } => {
                self.note(Level::Info, format!("saved weights at step {global_step} to {path}"));
            }
            Event::Checkpointed { global_step, .. } => {
                self.note(Level::Info, format!("checkpoint written at step {global_step}"));
            }
            Event::Restored { epoch, step, global_step, history } => {
                self.replay(history);
                self.global_step = *global_step;
                self.note(
                    Level::Info,
                    format!(
                        "resumed from the checkpoint at epoch {} step {step} (step {global_step} in all)",
                        epoch + 1
                    ),
                );
            }
            Event::Refused { reason } => self.note(Level::Warn, format!("refused: {reason}")),
            Event::Warning { message } => self.note(Level::Warn, message.clone()),
            Event::Finished(summary) => {
                self.state = RunState::Finished;
                let acc = summary.test_acc.map_or("n/a".to_owned(), |a| format!("{a:.3}"));
                self.note(
                    Level::Info,
                    format!("finished: test acc {acc}, {:.1} samples/sec", summary.samples_per_sec),
                );
                self.summary = Some((**summary).clone());
                if self.stop_requested {
                    self.quit = true;
                }
            }
            Event::Failed { message, .. } => {
                self.state = RunState::Failed;
                self.note(Level::Error, format!("training failed: {message}"));
                self.failure = Some(message.clone());
            }
        }
    }

    /// Rebuilds the curves and epoch figures from a resumed run's earlier events.
    fn replay(&mut self, history: &[Event]) {
        for event in history {
            match event {
                Event::Step(s) => {
                    self.curves.on_step(s);
                    self.last_step = Some((**s).clone());
                }
                Event::Epoch(e) => {
                    self.curves.on_epoch(e);
                    self.epoch_seconds.push(e.epoch_seconds);
                    self.last_epoch = Some((**e).clone());
                }
                Event::LrChanged { to, .. } => {
                    self.curves.mark(MarkKind::LrChange);
                    self.curves.on_lr(*to);
                }
                Event::Paused { .. } => self.curves.mark(MarkKind::Pause),
                _ => {}
            }
        }
    }

    /// The job's event stream closed. Before a final event that means the connection was lost
    /// (the job crashed, or this viewer fell too far behind and was dropped): say so, without
    /// claiming the run failed.
    pub fn on_disconnected(&mut self) {
        if !self.state.is_over() {
            self.dirty = true;
            self.state = RunState::Disconnected;
            self.note(
                Level::Error,
                "lost the connection to the job; q leaves, 'dpt-tui attach' reconnects if it still runs",
            );
        }
    }

    /// Applies a message of the device monitor.
    pub fn on_monitor(&mut self, msg: &MonitorMsg) {
        self.dirty = true;
        match msg {
            MonitorMsg::NvmlUnavailable { reason } => {
                let gpus = self.devices.iter().any(|d| matches!(d.device, DeviceId::Cuda(_)));
                let note = format!("{reason}: showing this process's CPU and memory use");
                if gpus {
                    self.note(Level::Warn, note.clone());
                }
                self.nvml_note = Some(note);
            }
            MonitorMsg::Samples(samples) => {
                for s in samples {
                    if let Some(d) = self.devices.iter_mut().find(|d| d.device == s.device) {
                        d.on_sample(s);
                    }
                }
            }
        }
    }

    /// Advances the clock; redraws once a second for the elapsed time and ETA.
    pub fn tick(&mut self, elapsed: f64) {
        if !self.state.is_over() && elapsed.floor() != self.elapsed.floor() {
            self.dirty = true;
        }
        if !self.state.is_over() {
            self.elapsed = elapsed;
        }
    }

    /// Mean seconds per finished epoch.
    pub fn sec_per_epoch(&self) -> Option<f64> {
        (!self.epoch_seconds.is_empty())
            .then(|| self.epoch_seconds.iter().sum::<f64>() / self.epoch_seconds.len() as f64)
    }

    /// Estimated seconds left, from the recent throughput.
    pub fn eta(&self) -> Option<f64> {
        let info = self.info.as_ref()?;
        let step = self.last_step.as_ref()?;
        let total = info.epochs * info.steps_per_epoch;
        let left_steps = total.saturating_sub(step.global_step) as f64;
        let samples_per_step = info.train_samples as f64 / info.steps_per_epoch.max(1) as f64;
        (step.samples_per_sec > 0.0).then(|| left_steps * samples_per_step / step.samples_per_sec)
    }
}
