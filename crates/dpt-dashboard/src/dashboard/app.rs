//! The dashboard's state, owned by the UI thread and changed only by engine events, monitor
//! samples, keys and the clock. Drawing reads it; nothing here draws or touches a tensor.

use crate::monitor::MonitorMsg;
use crate::record::text::{Level, Narrator};
use crate::record::{Change, Record};
use dpt_core::device::DeviceId;

use super::devices::{panels, rank_panels};
use super::log::EventLog;
pub use super::panels::{CurveSettings, CurvesPanel, DevicesPanel, RunPanel, Viewer};

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
    /// Going back to a rewind point (`r`, or offered after a loss that is not finite).
    Rewind(super::rewind::Picker),
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
    pub fn parse(self, input: &str) -> Result<crate::Control, String> {
        let input = input.trim();
        match self {
            PromptKind::Lr => input
                .parse::<f64>()
                .ok()
                .and_then(|v| crate::config_error::check_lr(v).ok())
                .map(|lr| crate::Control::SetLr { lr })
                .ok_or_else(|| format!("'{input}' is not a positive finite number; the lr is unchanged")),
            PromptKind::SaveDir if input.is_empty() => Err("type a folder, e.g. /scratch/run1".to_owned()),
            PromptKind::SaveDir => Ok(crate::Control::SaveTo { dir: input.into() }),
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

/// Everything the dashboard shows, panel by panel, and what the viewer has asked.
#[derive(Debug, Clone)]
pub struct App {
    /// The status panel: where the run stands.
    pub run: RunPanel,
    /// The curves, how they are drawn, and the baselines under them.
    pub curves: CurvesPanel,
    pub devices: DevicesPanel,
    pub log: EventLog,
    pub overlay: Option<Overlay>,
    pub viewer: Viewer,
    /// Words the records' log lines.
    narrator: Narrator,
    /// Something changed since the last frame.
    pub dirty: bool,
    /// Wall-clock time for log lines, `HH:MM:SS` (tests fix it).
    pub clock: fn() -> String,
}

fn wall_clock() -> String {
    chrono::Local::now().format("%H:%M:%S").to_string()
}

impl App {
    pub fn new(devices: &[DeviceId]) -> Self {
        App {
            run: RunPanel::default(),
            curves: CurvesPanel::default(),
            devices: DevicesPanel { panels: panels(devices), nvml_note: None, state: None },
            log: EventLog::default(),
            overlay: None,
            viewer: Viewer::default(),
            narrator: Narrator::default(),
            dirty: true,
            clock: wall_clock,
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
        self.curves.data.apply(record);
        self.run.data.on_record(record);
        if let Some(line) = self.narrator.line(record) {
            if !line.progress {
                for text in line.text.lines() {
                    self.note(line.level, text);
                }
            }
        }
        match record {
            Record::Start(info) => {
                self.run.state = RunState::Running;
                self.run.lr = Some(info.lr);
                if let Some(w) = &info.world {
                    // Every rank's devices, each replica under its global number.
                    let mut first = 0;
                    self.devices.panels = w
                        .devices
                        .iter()
                        .enumerate()
                        .flat_map(|(r, devices)| {
                            let p = rank_panels(devices, Some(r), w.hosts.get(r).map(String::as_str), first);
                            first += devices.len();
                            p
                        })
                        .collect();
                } else if self.devices.panels.is_empty() {
                    self.devices.panels = panels(&info.devices);
                }
                self.devices.state = info.memory;
                self.run.points.keep = info.settings.checkpoints.snapshots;
                // A one-process run's checkpoints kept on disk are points too.
                self.run.points.keep_on_disk =
                    if info.world.is_none() { info.settings.checkpoints.keep } else { 0 };
                self.run.info = Some((**info).clone());
            }
            Record::Step(s) => {
                let script = self.run.info.as_ref().is_some_and(|i| i.script.is_some());
                for d in &mut self.devices.panels {
                    d.on_step(s);
                    if script {
                        // A script's step has no allreduce of dpt-tui's to share out.
                        d.allreduce_share = None;
                    }
                }
                self.run.global_step = s.global_step;
                // The rate the schedule reached, which `+`, `-` and the status line start from.
                self.run.lr = Some(s.lr);
                self.run.last_step = Some((**s).clone());
            }
            Record::Epoch(e) => {
                self.run.epoch_seconds.push(e.epoch_seconds);
                self.run.last_epoch = Some((**e).clone());
            }
            Record::Event(change) => self.on_change(change),
            Record::Eval(e) => self.run.last_eval = Some((**e).clone()),
            Record::Summary(summary) => {
                self.run.state = RunState::Finished;
                self.run.summary = Some((**summary).clone());
                if self.viewer.stop_requested {
                    self.viewer.quit = true;
                }
            }
        }
    }

    fn on_change(&mut self, change: &Change) {
        match change {
            Change::LrChanged { to, .. } => self.run.lr = Some(*to),
            // Said at the boundary the run waits at: the step it is really at.
            Change::Paused { global_step } => {
                self.run.state = RunState::Paused;
                self.run.global_step = *global_step;
            }
            Change::Resumed { .. } if self.run.state == RunState::Paused => {
                self.run.state = RunState::Running
            }
            Change::StopRequested { .. } | Change::Preempted { .. } => self.run.state = RunState::Stopping,
            Change::Restored { global_step, .. } => self.run.global_step = *global_step,
            Change::Saved { .. } => self.run.save_problem = None,
            Change::SaveFailed { message, .. } => {
                // The engine sends the root cause ("No space left on device (os error 28)").
                let cause = message.split(" (os error").next().unwrap_or(message);
                self.run.save_problem = Some(format!("NOT SAVED ({cause}): s retries, S saves elsewhere"));
            }
            Change::Failed { message, .. } => {
                self.run.state = RunState::Failed;
                self.run.failure = Some(message.clone());
            }
            Change::Sampled { global_step, prompt, text } => {
                self.run.sample = Some((*global_step, prompt.clone(), text.clone()))
            }
            // The NaN pause: offer the newest rewind point, at half the lr.
            Change::NotFinite { then: dpt_core::policies::OnNan::Pause, .. }
                if self.viewer.steerable && self.overlay.is_none() =>
            {
                self.overlay =
                    super::rewind::Picker::offer(&self.run.points, self.run.lr).map(Overlay::Rewind);
            }
            Change::Resumed { .. }
            | Change::Refused { .. }
            | Change::Warning { .. }
            | Change::NotFinite { .. }
            | Change::InitFrom { .. }
            | Change::BestKept { .. }
            | Change::Tested { .. }
            | Change::EarlyStopped { .. }
            | Change::Straggler { .. }
            | Change::Rebucketed { .. } => {}
            // Taken at the boundary the run is at, often steps after the last step record (a
            // rewind, which goes back, sets the step itself).
            Change::Snapshot { global_step, .. } => {
                self.run.points.on_change(change);
                self.run.global_step = self.run.global_step.max(*global_step);
            }
            Change::Checkpointed { .. } => self.run.points.on_change(change),
            Change::Rewound { to, .. } => {
                self.run.points.on_change(change);
                self.run.global_step = *to;
            }
        }
    }

    /// The job's event stream closed. Before a final event that means the connection was lost
    /// (the job crashed, or this viewer fell too far behind and was dropped): say so, without
    /// claiming the run failed.
    pub fn on_disconnected(&mut self) {
        if !self.run.state.is_over() {
            self.dirty = true;
            self.run.state = RunState::Disconnected;
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
                let gpus = self.devices.panels.iter().any(|d| matches!(d.device, DeviceId::Cuda(_)));
                let note = if gpus {
                    format!("{reason}: GPU figures unavailable")
                } else {
                    format!("{reason}: showing this process's CPU and memory use")
                };
                if gpus {
                    self.note(Level::Warn, note.clone());
                }
                self.devices.nvml_note = Some(note);
            }
            MonitorMsg::Output { lines } => {
                for line in lines {
                    self.note(Level::Info, format!("│ {line}"));
                }
            }
            MonitorMsg::Samples(samples) => {
                let mut newcomers = Vec::new();
                for s in samples {
                    if let Some(d) = self.devices.panels.iter_mut().find(|d| d.takes(s)) {
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
        if !self.run.state.is_over() && elapsed.floor() != self.run.elapsed.floor() {
            self.dirty = true;
        }
        if !self.run.state.is_over() {
            self.run.elapsed = elapsed;
        }
    }
}
