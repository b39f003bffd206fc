//! The dashboard's state per panel, as ratatui's demo2 and burn-train's renderer keep it: the
//! run's status, the curves, the devices, and what the viewer may do and has asked. `App`
//! holds one of each and routes the run's records, the monitor's samples and the keys to them.

use std::path::PathBuf;

use crate::record::compare::Baseline;
use crate::record::curves::Curves;
use crate::record::{EpochStats, RunInfo, StepStats, Summary};

use super::app::RunState;
use super::curves::CurveView;
use super::devices::DeviceState;

/// Where the run stands: what the status panel and the summary show.
#[derive(Debug, Clone)]
pub struct RunPanel {
    pub info: Option<RunInfo>,
    pub state: RunState,
    pub last_step: Option<StepStats>,
    pub last_epoch: Option<EpochStats>,
    /// A script run's last evaluation (`run.eval(...)`).
    pub last_eval: Option<crate::record::script::EvalStats>,
    pub epoch_seconds: Vec<f64>,
    pub lr: Option<f64>,
    pub global_step: usize,
    pub summary: Option<Summary>,
    pub failure: Option<String>,
    /// The last save failed: what failed and how to retry (cleared by a good save).
    pub save_problem: Option<String>,
    /// Seconds since training started, pauses included (set by `App::tick`).
    pub elapsed: f64,
    /// The latest continuation a language model sampled: step, prompt, text.
    pub sample: Option<(usize, String, String)>,
    /// The rewind points the engine keeps (`r`).
    pub points: super::rewind::Points,
    /// Where the data stands, for the batches a rewind skips.
    pub data: super::rewind::DataPosition,
}

impl Default for RunPanel {
    fn default() -> Self {
        RunPanel {
            info: None,
            state: RunState::Starting,
            last_step: None,
            last_epoch: None,
            last_eval: None,
            epoch_seconds: Vec::new(),
            lr: None,
            global_step: 0,
            summary: None,
            failure: None,
            save_problem: None,
            elapsed: 0.0,
            sample: None,
            points: Default::default(),
            data: Default::default(),
        }
    }
}

impl RunPanel {
    /// Mean seconds per finished epoch.
    pub fn sec_per_epoch(&self) -> Option<f64> {
        (!self.epoch_seconds.is_empty())
            .then(|| self.epoch_seconds.iter().sum::<f64>() / self.epoch_seconds.len() as f64)
    }

    /// Estimated seconds left, from the recent throughput.
    pub fn eta(&self) -> Option<f64> {
        let info = self.info.as_ref()?;
        let step = self.last_step.as_ref()?;
        let total = info.settings.recipe.steps.unwrap_or(info.epochs() * info.steps_per_epoch);
        let left_steps = total.saturating_sub(step.global_step) as f64;
        if info.script.is_some() {
            // A script's steps are timed whole by its own clock.
            return (step.timing.total() > 0.0).then(|| left_steps * step.timing.total());
        }
        let samples_per_step = info.train_samples as f64 / info.steps_per_epoch.max(1) as f64;
        (step.samples_per_sec > 0.0).then(|| left_steps * samples_per_step / step.samples_per_sec)
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
    /// Which named figure the scalars view shows (an index into the run's, by name).
    pub scalar: usize,
}

impl CurveSettings {
    /// The exponential smoothing weight in use (0: off).
    pub fn smoothing_weight(&self) -> f64 {
        crate::record::smooth::WEIGHTS[self.smoothing % crate::record::smooth::WEIGHTS.len()]
    }
}

impl Default for CurveSettings {
    fn default() -> Self {
        CurveSettings { view: CurveView::Loss, recent: None, log_loss: false, smoothing: 0, scalar: 0 }
    }
}

/// The curves panel: the run's curves, how they are drawn, and recorded runs drawn under them.
#[derive(Debug, Clone, Default)]
pub struct CurvesPanel {
    pub data: Curves,
    pub settings: CurveSettings,
    /// Recorded runs drawn under this one.
    pub baselines: Vec<Baseline>,
    /// This run's directory (its neighbours are offered as baselines).
    pub run_dir: Option<PathBuf>,
}

/// The device panels, one per replica, and why NVML is not used when it is not.
#[derive(Debug, Clone, Default)]
pub struct DevicesPanel {
    pub panels: Vec<DeviceState>,
    pub nvml_note: Option<String>,
    /// What one replica holds for the whole run (the start record's), shown under each device.
    pub state: Option<dpt_core::record::StateBytes>,
}

/// What this viewer may do and what it has asked.
#[derive(Debug, Clone)]
pub struct Viewer {
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
    /// This viewer's rewind dialog holds the run (it sent `Control::Hold { on: true }`).
    pub holding: bool,
    /// Opened from a sweep's board: Esc goes back to it, the run going on.
    pub returns: bool,
}

impl Default for Viewer {
    fn default() -> Self {
        Viewer {
            lr_factor: 2.0,
            stop_requested: false,
            quit: false,
            detached: false,
            steerable: true,
            attached: false,
            holding: false,
            returns: false,
        }
    }
}
