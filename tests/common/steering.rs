//! What a steered script did and what its run recorded: the steps a script wrote to its file
//! (tests/scripts/client/), and the records that say where a control took effect.

use std::path::Path;
use std::time::Duration;

use dpt_tui::engine::Record;
use dpt_tui::record::Change;

use super::until_record;

/// How long a script's run may take to show what a test waits for.
pub const WAIT: Duration = Duration::from_secs(90);

/// Each line the script wrote: (step, lr its optimizer used), and the step it stopped at.
pub fn steps(out: &Path) -> (Vec<(usize, f64)>, Option<usize>) {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut steps = Vec::new();
    let mut stopped = None;
    // The last line may be half written.
    for v in text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        match (v.get("step"), v.get("stopped_at")) {
            (Some(s), _) => steps.push((s.as_u64().unwrap() as usize, v["lr"].as_f64().unwrap())),
            (_, Some(s)) => stopped = s.as_u64().map(|s| s as usize),
            _ => {}
        }
    }
    (steps, stopped)
}

pub fn last_step(out: &Path) -> Option<usize> {
    steps(out).0.last().map(|s| s.0)
}

pub fn paused_at(records: &crossbeam_channel::Receiver<Record>) -> usize {
    match until_record(records, WAIT, |r| matches!(r, Record::Event(Change::Paused { .. }))).0 {
        Record::Event(Change::Paused { global_step }) => global_step,
        _ => unreachable!(),
    }
}

pub fn stop_at(records: &crossbeam_channel::Receiver<Record>) -> usize {
    match until_record(records, WAIT, |r| matches!(r, Record::Event(Change::StopRequested { .. }))).0 {
        Record::Event(Change::StopRequested { global_step }) => global_step,
        _ => unreachable!(),
    }
}

pub fn step_past(records: &crossbeam_channel::Receiver<Record>, step: usize) -> Record {
    until_record(records, WAIT, |r| matches!(r, Record::Step(s) if s.global_step > step)).0
}
