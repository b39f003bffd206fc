//! A script run's lines (`dpt-tui run -- CMD`): its start, its steps with the figures the script
//! named, and its evaluations' numbers.

use super::{device_list, lr_text, ms};
use crate::record::{RunInfo, StepStats};

/// A number as a line shows it: four significant digits, whatever its size.
pub(super) fn figure(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{}", (v * 1e4).round() / 1e4)
    }
}

/// What a script run's start says: what it is, where, and what it can be asked.
pub(super) fn script_start_line(info: &RunInfo, script: &crate::record::script::ScriptInfo) -> String {
    let devices = if script.devices.is_empty() {
        device_list(&info.devices)
    } else {
        script.devices.iter().map(crate::record::script::ScriptDevice::label).collect::<Vec<_>>().join(", ")
    };
    let can: Vec<String> = script
        .can
        .iter()
        .filter(|c| **c != crate::record::script::Capability::Unknown)
        .map(|c| serde_json::to_value(c).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default())
        .collect();
    format!(
        "watching {} ({} script, {} rank(s) on {devices}){}; it takes: {}",
        script.label,
        script.framework,
        script.world_size,
        script.total_steps.map_or(String::new(), |n| format!(", {n} steps")),
        if can.is_empty() { "no controls".to_owned() } else { can.join(", ") }
    )
}

/// A script run's report window: only what the script reported.
pub(super) fn script_step_line(s: &StepStats, total: Option<usize>, classes: bool) -> String {
    let mut line = match total {
        Some(n) => format!("step {:>5}/{n}", s.global_step),
        None => format!("step {:>5}", s.global_step),
    };
    line += &format!("  loss {:.4}", s.loss);
    if classes && s.acc.is_finite() {
        line += &format!("  acc {:.3}", s.acc);
    }
    if s.lr > 0.0 {
        line += &format!("  lr {}", lr_text(s.lr));
    }
    if s.samples_per_sec > 0.0 {
        line += &format!("  {:.1} samples/s", s.samples_per_sec);
    }
    if s.timing.compute > 0.0 {
        line += &format!("  step {} ms", ms(s.timing.compute));
    }
    for (name, v) in &s.scalars {
        line += &format!("  {name} {}", figure(*v));
    }
    line
}
