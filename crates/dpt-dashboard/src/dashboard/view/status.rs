//! The status lines: state, model, devices, progress, speed (with the model FLOP/s and MFU
//! once counted), time, lr, momentum (or the optimizer, when not SGD) and batch. The items
//! flow over the lines the layout gives, so nothing is cut at 80 columns. Under them, the last
//! report window's verdict on what limits the step.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::record::bottleneck::{Bottleneck, Cause};

use super::{hms, Look};
use crate::dashboard::app::{App, RunState};

/// One status item: a dim label and a value in `style`.
struct Item {
    label: String,
    value: String,
    style: Style,
}

impl Item {
    fn width(&self) -> usize {
        self.label.chars().count() + self.value.chars().count() + 3
    }
}

/// The verdict's label.
const WHY: &str = "  bottleneck";

/// The last report window's verdict, when it has one.
fn verdict(app: &App) -> Option<&Bottleneck> {
    app.run.last_step.as_ref()?.bottleneck.as_ref()
}

/// The verdict's text cut into rows of `width` columns at spaces, at most `most` of them (the
/// last ending in `…` when it does not fit), each row after the first indented.
fn verdict_text(b: &Bottleneck, width: u16, most: usize) -> Vec<String> {
    let width = usize::from(width).max(WHY.len() + 8);
    let mut rows = vec![WHY.to_owned()];
    for word in b.line().split(' ') {
        let row = rows.last_mut().expect("a row");
        let len = row.chars().count();
        if len + word.chars().count() + usize::from(!row.ends_with(' ')) <= width {
            if !row.ends_with(' ') {
                row.push(' ');
            }
            row.push_str(word);
        } else if rows.len() == most {
            let row = rows.last_mut().expect("a row");
            let kept: String = row.chars().take(width - 1).collect();
            *row = kept + "…";
            return rows;
        } else {
            rows.push(format!("    {word}"));
        }
    }
    rows
}

/// The most rows the verdict takes: its advice fits at 80 columns.
const VERDICT_ROWS: usize = 3;

/// The rows the verdict takes at `width` columns under the status items (none without one).
pub fn verdict_rows(app: &App, width: u16) -> u16 {
    verdict(app).map_or(0, |b| verdict_text(b, width, VERDICT_ROWS).len() as u16)
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look, compact: bool) {
    let rows = verdict_rows(app, area.width);
    let [area, why] = Layout::vertical([Constraint::Min(1), Constraint::Length(rows)]).areas(area);
    if let Some(b) = verdict(app) {
        draw_verdict(frame, why, b, look);
    }
    draw_items(frame, area, app, look, compact);
}

/// `bottleneck input-bound: replicas wait …: raise --decode-threads`, its cause in the warning
/// colour (the good case, compute, in the finished one).
fn draw_verdict(frame: &mut Frame, area: Rect, b: &Bottleneck, look: &Look) {
    let t = look.theme;
    let colour = if b.cause == Cause::Compute { t.finished } else { t.warning };
    let cause = if t.monochrome { t.highlight() } else { t.fg(colour) }.add_modifier(Modifier::BOLD);
    let label = b.cause.label();
    let lines: Vec<Line> = verdict_text(b, area.width, VERDICT_ROWS)
        .into_iter()
        .enumerate()
        .map(|(i, row)| match (i, row.strip_prefix(WHY).and_then(|r| r.strip_prefix(' '))) {
            (0, Some(rest)) if rest.starts_with(label) => Line::from(vec![
                Span::styled(WHY, t.fg(t.dim)),
                Span::raw(" "),
                Span::styled(label, cause),
                Span::styled(rest[label.len()..].to_owned(), t.fg(t.text)),
            ]),
            _ => Line::styled(row, t.fg(t.text)),
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_items(frame: &mut Frame, area: Rect, app: &App, look: &Look, compact: bool) {
    let t = look.theme;
    let state_color = match app.run.state {
        RunState::Starting | RunState::Running => t.running,
        RunState::Paused | RunState::Stopping => t.paused,
        RunState::Finished => t.finished,
        RunState::Failed | RunState::Disconnected => t.failed,
    };
    let state_style =
        if t.monochrome { t.highlight() } else { t.fg(state_color) }.add_modifier(Modifier::BOLD);
    let mut lines = vec![vec![Span::styled(format!(" {} ", app.run.state.label()), state_style)]];
    let mut width = app.run.state.label().len() + 2;
    let Some(info) = &app.run.info else {
        lines[0].push(Span::styled("  waiting for the workers to start", t.fg(t.dim)));
        frame.render_widget(Paragraph::new(Line::from(lines.remove(0))), area);
        return;
    };
    let text = t.fg(t.text);
    // At 80 columns the long labels do not fit on two lines.
    let short = |label: &str| {
        match label {
            "momentum" if compact => "mom",
            "optimizer" if compact => "opt",
            "sec/epoch" if compact => "s/epoch",
            "elapsed" if compact => "time",
            other => other,
        }
        .to_owned()
    };
    let item = |label: &str, value: String, style: Style| Item { label: short(label), value, style };
    let (epoch, step) = app.run.last_step.as_ref().map_or((1, 0), |s| (s.epoch, s.step));
    let dash = || "-".to_owned();
    let mut items = Vec::new();
    if let Some(problem) = &app.run.save_problem {
        items.push(item("", problem.clone(), t.fg(t.error).add_modifier(Modifier::BOLD)));
    }
    items.extend([item(
        "",
        match &info.world {
            Some(w) => format!(
                "{} on {} ranks, {} replicas",
                info.model_label(),
                w.hosts.len(),
                w.replicas.iter().sum::<usize>()
            ),
            None => {
                format!("{} on {}", info.model_label(), crate::record::text::device_list(&info.devices))
            }
        },
        text.add_modifier(Modifier::BOLD),
    )]);
    match info.settings.recipe.steps {
        // A run measured in steps (token data) counts them, not epochs.
        Some(n) => items.push(item("step", format!("{}/{n}", app.run.global_step), text)),
        None => items.extend([
            item("epoch", format!("{epoch}/{}", info.epochs()), text),
            item("step", format!("{step}/{}", info.steps_per_epoch), text),
        ]),
    }
    items.extend([
        item(
            "lr",
            app.run.lr.map_or_else(dash, crate::record::text::lr_text),
            t.fg(t.lr).add_modifier(Modifier::BOLD),
        ),
        match info.settings.optimizer {
            o if o.kind != crate::optim::OptimizerKind::Sgd => item("optimizer", o.kind.to_string(), text),
            o => item("momentum", format!("{}", o.momentum), text),
        },
        item("batch", format!("{}", info.settings.recipe.batch_size), text),
    ]);
    if let Some(s) = app.run.last_step.as_ref().filter(|s| s.loss_scale.is_some()) {
        items.push(item("loss scale", crate::record::text::loss_scale(s), text));
    }
    if let Some(l) = app.run.last_step.as_ref().and_then(|s| s.loader) {
        // Under half a batch ready on average: the replicas wait for data.
        let style = if l.ready < 0.5 { t.fg(t.warning).add_modifier(Modifier::BOLD) } else { text };
        items.push(item("loader", crate::record::text::loader(&l), style));
    }
    items.extend([
        item("allreduce", if info.allreduce.is_empty() { dash() } else { info.allreduce.clone() }, text),
        item(
            "samples/s",
            app.run.last_step.as_ref().map_or_else(dash, |s| format!("{:.0}", s.samples_per_sec)),
            text,
        ),
    ]);
    match info.settings.data.block_size.filter(|_| info.settings.recipe.steps.is_some()) {
        Some(t) => items.push(item(
            "tokens/s",
            app.run.last_step.as_ref().map_or_else(dash, |s| format!("{:.0}", s.samples_per_sec * t as f64)),
            text,
        )),
        None => items.push(item(
            "sec/epoch",
            app.run.sec_per_epoch().map_or_else(dash, |v| format!("{v:.1}")),
            text,
        )),
    }
    // Once the model's FLOPs are counted: `MFU 41% (203 TFLOP/s)`, the rate alone without a
    // known peak. The label is in the value, so the item has none.
    if let Some(s) = app.run.last_step.as_ref() {
        if let Some(f) = s.model_flops {
            items.push(item("", crate::flops::mfu_label(f, s.mfu), text));
        }
    }
    items.extend([
        item("elapsed", hms(app.run.elapsed), text),
        item(
            "ETA",
            if app.run.state.is_over() { dash() } else { app.run.eta().map_or_else(dash, hms) },
            text,
        ),
        match info.task.has_classes() {
            true => item(
                "test acc",
                app.run.last_epoch.as_ref().map_or_else(dash, |e| format!("{:.3}", e.test_acc)),
                t.fg(t.test_acc),
            ),
            // A run without classes: the evaluated loss and its perplexity.
            false => item(
                "val loss",
                app.run.last_epoch.as_ref().map_or_else(dash, |e| match info.has_perplexity() {
                    true => format!("{:.3} (ppl {:.1})", e.test_loss, e.test_loss.exp()),
                    false => format!("{:.3}", e.test_loss),
                }),
                t.fg(t.test_loss),
            ),
        },
    ]);
    {
        if let Some(s) = &app.run.last_step {
            let total = s.timing.total().max(1e-12);
            let pct = |v: f64| format!("{:.0}%", 100.0 * v / total);
            // GPU phases come from CUDA events on sampled steps; say so beside the figures.
            let events = app.run.info.as_ref().is_some_and(|i| i.timing.starts_with("CUDA"));
            let synced = app.run.info.as_ref().is_some_and(|i| i.timing.contains("device sync"));
            let label = match (events, synced) {
                (true, _) => "step (CUDA events)",
                (false, true) => "step (synced)",
                _ => "step",
            };
            items.push(item(
                label,
                if s.timed_steps == Some(0) {
                    "warm-up, not timed".to_owned()
                } else {
                    format!(
                        "{:.1} ms = data {} + fwd/bwd {} + allreduce {} + update {}",
                        1e3 * s.timing.total(),
                        pct(s.timing.data),
                        pct(s.timing.compute),
                        pct(s.timing.allreduce),
                        pct(s.timing.update)
                    )
                },
                text,
            ));
        }
    }
    let max_lines = area.height as usize;
    for it in items {
        if width + it.width() > area.width as usize {
            if lines.len() == max_lines {
                // No room left: the rest would be cut mid-word; leave it out.
                continue;
            }
            lines.push(Vec::new());
            width = 0;
        }
        width += it.width();
        let line = lines.last_mut().expect("at least one line");
        line.push(Span::styled(format!("  {}", it.label), t.fg(t.dim)));
        line.push(Span::styled(
            format!("{}{}", if it.label.is_empty() { "" } else { " " }, it.value),
            it.style,
        ));
    }
    let lines: Vec<Line> = lines.into_iter().map(Line::from).collect();
    frame.render_widget(Paragraph::new(lines), area);
}
