//! The dashboard's state, owned by the UI thread and changed only by engine events, monitor
//! samples, keys and the clock. Drawing reads it; nothing here draws or touches a tensor.

use crate::engine::DeviceId;
use crate::monitor::MonitorMsg;
use crate::record::compare::Baseline;
use crate::record::curves::Curves;
use crate::record::text::{Level, Narrator};
use crate::record::{Change, EpochStats, Record, RunInfo, StepStats, Summary};

use super::curves::CurveView;
use super::devices::{panels, rank_panels, DeviceState};
use super::log::EventLog;

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
    /// A line of input: what was typed and why the last entry was refused.
    Prompt {
        kind: PromptKind,
        input: String,
        error: Option<String>,
    },
    ConfirmQuit,
    /// The last evaluation by class: accuracy and confusion counts (`c`).
    Classes,
    /// The recorded runs beside this one, to overlay as baselines (`b`).
    Baselines {
        entries: Vec<std::path::PathBuf>,
        cursor: usize,
    },
}

/// What a prompt asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// An exact learning rate (`l`).
    Lr,
    /// A folder to save into from now on (`S`, e.g. when the disk is full).
    SaveDir,
}

impl PromptKind {
    /// The control that `input` asks for, or why it is refused.
    pub fn parse(self, input: &str) -> Result<crate::engine::Control, String> {
        let input = input.trim();
        match self {
            PromptKind::Lr => input
                .parse::<f64>()
                .ok()
                .and_then(|v| crate::engine::config::check_lr(v).ok())
                .map(|lr| crate::engine::Control::SetLr { lr })
                .ok_or_else(|| format!("'{input}' is not a positive finite number; the lr is unchanged")),
            PromptKind::SaveDir if input.is_empty() => Err("type a folder, e.g. /scratch/run1".to_owned()),
            PromptKind::SaveDir => Ok(crate::engine::Control::SaveTo { dir: input.into() }),
        }
    }

    /// Whether `c` may be typed into this prompt.
    pub fn accepts(self, c: char, len: usize) -> bool {
        match self {
            PromptKind::Lr => len < 32 && (c.is_ascii_alphanumeric() || "+-.".contains(c)),
            PromptKind::SaveDir => len < 1024 && !c.is_control(),
        }
    }
}

/// How the curve panel is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveSettings {
    pub view: CurveView,
    /// Show only the last this many epochs (`None`: the whole run).
    pub recent: Option<f64>,
    pub log_loss: bool,
    /// Index into `record::smooth::WEIGHTS` (0: no smoothing).
    pub smoothing: usize,
}

impl CurveSettings {
    /// The exponential smoothing weight in use (0: off).
    pub fn smoothing_weight(&self) -> f64 {
        crate::record::smooth::WEIGHTS[self.smoothing % crate::record::smooth::WEIGHTS.len()]
    }
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
    /// The last save failed: what failed and how to retry (cleared by a good save).
    pub save_problem: Option<String>,
    /// Words the records' log lines.
    narrator: Narrator,
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
    /// Recorded runs drawn under this one.
    pub baselines: Vec<Baseline>,
    /// This run's directory (its neighbours are offered as baselines).
    pub run_dir: Option<std::path::PathBuf>,
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
            settings: CurveSettings { view: CurveView::Loss, recent: None, log_loss: false, smoothing: 0 },
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
            save_problem: None,
            narrator: Narrator::default(),
            elapsed: 0.0,
            lr_factor: 2.0,
            stop_requested: false,
            quit: false,
            detached: false,
            steerable: true,
            attached: false,
            dirty: true,
            clock: wall_clock,
            baselines: Vec::new(),
            run_dir: None,
        }
    }

    pub(super) fn note(&mut self, level: Level, text: impl Into<String>) {
        let time = (self.clock)();
        self.log.push(time, level, text);
    }

    /// Applies one record of the run: the curves and the log lines come from the record's own
    /// folds; the rest is what the status line and panels show.
    pub fn on_event(&mut self, record: &Record) {
        self.dirty = true;
        self.curves.apply(record);
        if let Some(line) = self.narrator.line(record) {
            if !line.progress {
                for text in line.text.lines() {
                    self.note(line.level, text);
                }
            }
        }
        match record {
            Record::Start(info) => {
                self.state = RunState::Running;
                self.lr = Some(info.lr);
                if let Some(w) = &info.world {
                    // Every rank's devices, each replica under its global number.
                    let mut first = 0;
                    self.devices = w
                        .devices
                        .iter()
                        .enumerate()
                        .flat_map(|(r, devices)| {
                            let p = rank_panels(devices, Some(r), w.hosts.get(r).map(String::as_str), first);
                            first += devices.len();
                            p
                        })
                        .collect();
                } else if self.devices.is_empty() {
                    self.devices = panels(&info.devices);
                }
                self.info = Some((**info).clone());
            }
            Record::Step(s) => {
                for d in &mut self.devices {
                    d.on_step(s);
                }
                self.global_step = s.global_step;
                self.last_step = Some((**s).clone());
            }
            Record::Epoch(e) => {
                self.epoch_seconds.push(e.epoch_seconds);
                self.last_epoch = Some((**e).clone());
            }
            Record::Event(change) => self.on_change(change),
            Record::Summary(summary) => {
                self.state = RunState::Finished;
                self.summary = Some((**summary).clone());
                if self.stop_requested {
                    self.quit = true;
                }
            }
        }
    }

    fn on_change(&mut self, change: &Change) {
        match change {
            Change::LrChanged { to, .. } => self.lr = Some(*to),
            Change::Paused { .. } => self.state = RunState::Paused,
            Change::Resumed { .. } if self.state == RunState::Paused => self.state = RunState::Running,
            Change::StopRequested { .. } | Change::Preempted { .. } => self.state = RunState::Stopping,
            Change::Restored { global_step, .. } => self.global_step = *global_step,
            Change::Saved { .. } => self.save_problem = None,
            Change::SaveFailed { message, .. } => {
                // The engine sends the root cause ("No space left on device (os error 28)").
                let cause = message.split(" (os error").next().unwrap_or(message);
                self.save_problem = Some(format!("NOT SAVED ({cause}): s retries, S saves elsewhere"));
            }
            Change::Failed { message, .. } => {
                self.state = RunState::Failed;
                self.failure = Some(message.clone());
            }
            Change::Resumed { .. }
            | Change::Checkpointed { .. }
            | Change::Refused { .. }
            | Change::Warning { .. }
            | Change::InitFrom { .. }
            | Change::BestKept { .. }
            | Change::Tested { .. }
            | Change::EarlyStopped { .. }
            | Change::Straggler { .. } => {}
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
                let note = if gpus {
                    format!("{reason}: GPU figures unavailable")
                } else {
                    format!("{reason}: showing this process's CPU and memory use")
                };
                if gpus {
                    self.note(Level::Warn, note.clone());
                }
                self.nvml_note = Some(note);
            }
            MonitorMsg::Samples(samples) => {
                let mut newcomers = Vec::new();
                for s in samples {
                    if let Some(d) = self.devices.iter_mut().find(|d| d.takes(s)) {
                        newcomers.extend(d.on_sample(s));
                    }
                }
                for text in newcomers {
                    self.note(Level::Warn, text);
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
        let total = info.epochs() * info.steps_per_epoch;
        let left_steps = total.saturating_sub(step.global_step) as f64;
        let samples_per_step = info.train_samples as f64 / info.steps_per_epoch.max(1) as f64;
        (step.samples_per_sec > 0.0).then(|| left_steps * samples_per_step / step.samples_per_sec)
    }
}
