//! A sweep for TensorBoard's HParams plugin: every trial's run already writes its settings as a
//! session's hyperparameters and its evaluations as scalars (`tensorboard/` in its run
//! directory); the sweep adds how each trial ended (a session's end) and, in the sweep's own
//! `tensorboard/`, the experiment: the swept settings with their values and the metric tags,
//! which make the plugin's table show those columns. `tensorboard --logdir SWEEP` then shows it.

use std::path::Path;

use dpt_tui::record::tensorboard::scalars::{epoch_metric_tags, hparams};
use dpt_tui::record::tensorboard::{EventFile, HParam, SessionStatus, TENSORBOARD_DIR};
use dpt_tui::record::run::RunFold;
use dpt_tui::sweep::SweepFile;

/// Writes how the trial in `dir` ended, beside its run's own event files (a trial that never
/// started a run has none, and gets none).
pub fn session_end(dir: &Path, status: SessionStatus) -> std::io::Result<()> {
    if !dir.join(TENSORBOARD_DIR).is_dir() {
        return Ok(());
    }
    let mut file = EventFile::create(dir, dpt_tui::unix_now(), &dpt_tui::hostname())?;
    file.session_end(dpt_tui::unix_now(), status)
}

/// Writes the sweep's experiment into `folder/tensorboard/`, its hyperparameters typed as the
/// trials' runs recorded them; nothing before a trial's run started.
pub fn experiment(folder: &Path, file: &SweepFile) -> std::io::Result<()> {
    let info = file.trials.iter().find_map(|t| RunFold::read(&folder.join(&t.dir)).ok()?.info);
    let Some(info) = info else { return Ok(()) };
    let recorded = hparams(&info);
    let swept: Vec<(String, Vec<HParam>)> = file
        .axes
        .iter()
        .map(|a| {
            let values = a.values.iter().map(|v| typed(recorded.get(&a.key), v)).collect();
            (a.key.clone(), values)
        })
        .collect();
    let mut out = EventFile::create(folder, dpt_tui::unix_now(), &dpt_tui::hostname())?;
    out.experiment(dpt_tui::unix_now(), &swept, &epoch_metric_tags(&info))
}

/// A swept value's text as the type its setting was recorded with (a number stays text where
/// it does not read as one).
fn typed(recorded: Option<&HParam>, text: &str) -> HParam {
    match recorded {
        Some(HParam::Number(_)) => {
            text.parse().map_or_else(|_| HParam::Text(text.to_owned()), HParam::Number)
        }
        Some(HParam::Bool(_)) => text.parse().map_or_else(|_| HParam::Text(text.to_owned()), HParam::Bool),
        _ => HParam::Text(text.to_owned()),
    }
}
