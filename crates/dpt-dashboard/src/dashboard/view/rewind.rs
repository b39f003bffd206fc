//! The rewind picker's window: the points with their step, age, train loss and lr; then the lr
//! to go on with; then whether to skip the batches since. After a loss that is not finite, the
//! offer of the newest point.

use ratatui::style::Modifier;
use ratatui::text::{Line, Span};

use super::Look;
use crate::dashboard::app::{App, RunState};
use crate::dashboard::rewind::{Picker, Point};

/// `seconds` as `3m 12s`, `1h 05m`, `40s`.
fn age(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, (s / 60) % 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The window's title, lines and width.
pub fn lines(app: &App, look: &Look, picker: &Picker) -> (&'static str, Vec<Line<'static>>, u16) {
    let t = look.theme;
    let points = &app.run.points.all();
    let find = |step: usize| points.iter().find(|p| p.global_step == step);
    let since = |p: Option<&Point>| p.map_or(0, |p| p.batches_since(&app.run.data, app.run.global_step));
    let lr = |v: f64| crate::record::text::lr_text(v);
    let dim = |s: String| Line::from(Span::styled(s, t.fg(t.dim)));
    match picker {
        Picker::Choose { cursor } => {
            // The run's own clock, so that a late viewer's ages are right too.
            let now = app.run.info.as_ref().and_then(|i| i.started_unix).map(|t0| t0 + app.run.elapsed);
            // Paused (held by this list) once the engine says so: at that very step.
            let at = if app.run.state == RunState::Paused { "paused" } else { "now" };
            let mut lines = vec![
                dim(format!(
                    "{at} at step {}, lr {}; go back to:",
                    app.run.global_step,
                    app.run.lr.map_or("-".to_owned(), lr)
                )),
                dim(format!("  {:>9}  {:>8}  {:>10}  {:>9}", "step", "age", "train loss", "lr")),
            ];
            for (i, p) in points.iter().enumerate() {
                let text = format!(
                    "  {:>9}  {:>8}  {:>10}  {:>9}",
                    p.global_step,
                    match (now, p.unix) {
                        (Some(n), Some(t)) => age(n - t),
                        _ if p.on_disk => "on disk".to_owned(),
                        _ => "-".to_owned(),
                    },
                    p.loss.map_or("-".to_owned(), |l| format!("{l:.4}")),
                    if p.lr.is_finite() { lr(p.lr) } else { "-".to_owned() }
                );
                let style =
                    if i == *cursor { t.fg(t.text).add_modifier(Modifier::REVERSED) } else { t.fg(t.text) };
                lines.push(Line::from(Span::styled(text, style)));
            }
            lines.push(dim("arrows choose, Enter goes on to the lr, Esc closes".to_owned()));
            ("rewind", lines, 64)
        }
        Picker::Lr { step, input, error } => {
            let cursor = if look.ascii { "_" } else { "▏" };
            let mut lines = vec![
                dim(format!(
                    "back to step {step}; go on with lr (now {}; half offered):",
                    app.run.lr.map_or("-".to_owned(), lr)
                )),
                Line::from(vec![
                    Span::styled(format!("> {input}"), t.fg(t.text)),
                    Span::styled(cursor, t.fg(t.accent)),
                ]),
            ];
            if let Some(e) = error {
                lines.push(Line::from(Span::styled(e.clone(), t.fg(t.error))));
            }
            lines.push(dim("Enter goes on, Esc cancels".to_owned()));
            ("rewind: the lr", lines, 64)
        }
        Picker::Skip { step, .. } | Picker::Offer { step, .. } if find(*step).is_none() => (
            "rewind",
            vec![
                Line::from(Span::styled(
                    // A held run keeps its points: another viewer's rewind dropped it.
                    format!("the point at step {step} is no longer kept: the run went back before it"),
                    t.fg(t.warning),
                )),
                dim("Esc closes; r lists the points kept now".to_owned()),
            ],
            72,
        ),
        Picker::Skip { step, lr: to } => {
            let m = since(find(*step));
            let lines = vec![
                Line::from(Span::styled(
                    format!("back to step {step} at lr {}: skip the {m} batch(es) since then?", lr(*to)),
                    t.fg(t.text),
                )),
                Line::from(vec![
                    Span::styled(" y ", t.highlight()),
                    Span::styled(" skip them   ", t.fg(t.text)),
                    Span::styled(" n ", t.highlight()),
                    Span::styled(" train them again   ", t.fg(t.text)),
                    Span::styled("Esc", t.highlight()),
                    Span::styled(" cancel", t.fg(t.text)),
                ]),
            ];
            ("rewind: skip", lines, 72)
        }
        Picker::Offer { step, lr: to } => {
            let m = since(find(*step));
            let lines = vec![
                Line::from(Span::styled(
                    format!("Rewind to step {step} with lr {} (half), skipping {m} batch(es)?", lr(*to)),
                    t.fg(t.text),
                )),
                Line::from(vec![
                    Span::styled(" y ", t.highlight()),
                    Span::styled(" rewind   ", t.fg(t.text)),
                    Span::styled(" n ", t.highlight()),
                    Span::styled(" stay paused (r chooses another point)", t.fg(t.text)),
                ]),
            ];
            ("the loss is not finite", lines, 72)
        }
    }
}
