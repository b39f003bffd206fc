//! The status lines: state, model and devices, progress, lr, momentum (or the optimizer, when
//! not SGD), batch, loss scale, loader, allreduce, speed (with the model FLOP/s and MFU once
//! counted), time, the last evaluation and the step's split. The items flow over the lines the
//! layout gives, so nothing is cut at 80 columns. Under them, the last report window's verdict
//! on what limits the step.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::{hms, Look};
use crate::dashboard::app::{App, RunState};
use crate::dashboard::theme::Theme;
use crate::record::bottleneck::{Bottleneck, Cause};
use crate::record::RunInfo;

/// One status item: a dim label and a value in `style`.
struct Item {
    label: String,
    value: String,
    style: Style,
}

impl Item {
    fn new(label: &str, value: String, style: Style) -> Self {
        Item { label: label.to_owned(), value, style }
    }

    /// The item with the long labels shortened, which at 80 columns do not fit on two lines.
    fn short(self) -> Self {
        let label = match self.label.as_str() {
            "momentum" => "mom",
            "optimizer" => "opt",
            "sec/epoch" => "s/epoch",
            "elapsed" => "time",
            _ => return self,
        };
        Item { label: label.to_owned(), ..self }
    }

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

/// The run's state, then the items flowed over the rows of `area`.
fn draw_items(frame: &mut Frame, area: Rect, app: &App, look: &Look, compact: bool) {
    let t = look.theme;
    let state = state(app, t);
    let Some(info) = &app.run.info else {
        let waiting = Span::styled("  waiting for the workers to start", t.fg(t.dim));
        frame.render_widget(Paragraph::new(Line::from(vec![state, waiting])), area);
        return;
    };
    // A script run reports what its script reported, no settings of dpt-tui's own.
    let native = info.script.is_none();
    let items = [
        save_problem(app, t),
        Some(model(info, t)),
        epoch(app, info, t).filter(|_| native),
        Some(step(app, info, t)),
        Some(lr(app, t)),
        native.then(|| optimizer(info, t)),
        native.then(|| batch(info, t)),
        loss_scale(app, t),
        loader(app, t),
        native.then(|| allreduce(info, t)),
        Some(samples_per_sec(app, t)),
        native.then(|| rate(app, info, t)),
        mfu(app, t),
        Some(elapsed(app, t)),
        (native || info.settings.recipe.steps.is_some()).then(|| eta(app, t)),
        Some(if native { evaluation(app, info, t) } else { script_evaluation(app, t) }),
        step_time(app, info, t),
    ];
    let items = items.into_iter().flatten().map(|it| if compact { it.short() } else { it });
    frame.render_widget(Paragraph::new(flow(state, items, area, t)), area);
}

/// The items after `state`, row by row, each row as full as the width allows; the items that
/// do not fit on the last row are left out, never cut.
fn flow<'a>(state: Span<'a>, items: impl Iterator<Item = Item>, area: Rect, t: &Theme) -> Vec<Line<'a>> {
    let mut width = state.width();
    let mut lines = vec![vec![state]];
    let max_lines = area.height as usize;
    for it in items {
        if width + it.width() > area.width as usize {
            if lines.len() == max_lines {
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
    lines.into_iter().map(Line::from).collect()
}

/// ` running `, in the state's colour.
fn state(app: &App, t: &Theme) -> Span<'static> {
    let colour = match app.run.state {
        RunState::Starting | RunState::Running => t.running,
        RunState::Paused | RunState::Stopping => t.paused,
        RunState::Finished => t.finished,
        RunState::Failed | RunState::Disconnected => t.failed,
    };
    let style = if t.monochrome { t.highlight() } else { t.fg(colour) }.add_modifier(Modifier::BOLD);
    Span::styled(format!(" {} ", app.run.state.label()), style)
}

/// What is not known yet.
fn dash() -> String {
    "-".to_owned()
}

/// Why the last save failed, first and in the error colour.
fn save_problem(app: &App, t: &Theme) -> Option<Item> {
    let problem = app.run.save_problem.as_ref()?;
    Some(Item::new("", problem.clone(), t.fg(t.error).add_modifier(Modifier::BOLD)))
}

/// `resnet18 on cuda:0, cuda:1`, or on so many ranks and replicas.
fn model(info: &RunInfo, t: &Theme) -> Item {
    let value = match &info.world {
        Some(w) => format!(
            "{} on {} ranks, {} replicas",
            info.model_label(),
            w.hosts.len(),
            w.replicas.iter().sum::<usize>()
        ),
        None => format!("{} on {}", info.model_label(), crate::record::text::device_list(&info.devices)),
    };
    Item::new("", value, t.fg(t.text).add_modifier(Modifier::BOLD))
}

/// The epoch of a run measured in epochs.
fn epoch(app: &App, info: &RunInfo, t: &Theme) -> Option<Item> {
    if info.settings.recipe.steps.is_some() {
        return None;
    }
    let epoch = app.run.last_step.as_ref().map_or(1, |s| s.epoch);
    Some(Item::new("epoch", format!("{epoch}/{}", info.epochs()), t.fg(t.text)))
}

/// The step in the epoch; a run measured in steps (token data) counts them over the run.
fn step(app: &App, info: &RunInfo, t: &Theme) -> Item {
    let value = match info.settings.recipe.steps {
        Some(n) => format!("{}/{n}", app.run.global_step),
        None if info.script.is_some() => app.run.global_step.to_string(),
        None => {
            let step = app.run.last_step.as_ref().map_or(0, |s| s.step);
            format!("{step}/{}", info.steps_per_epoch)
        }
    };
    Item::new("step", value, t.fg(t.text))
}

fn lr(app: &App, t: &Theme) -> Item {
    let value = app.run.lr.map_or_else(dash, crate::record::text::lr_text);
    Item::new("lr", value, t.fg(t.lr).add_modifier(Modifier::BOLD))
}

/// SGD's momentum, or the optimizer when not SGD.
fn optimizer(info: &RunInfo, t: &Theme) -> Item {
    match info.settings.optimizer {
        o if o.kind != crate::optim::OptimizerKind::Sgd => {
            Item::new("optimizer", o.kind.to_string(), t.fg(t.text))
        }
        o => Item::new("momentum", format!("{}", o.momentum), t.fg(t.text)),
    }
}

fn batch(info: &RunInfo, t: &Theme) -> Item {
    Item::new("batch", format!("{}", info.settings.recipe.batch_size), t.fg(t.text))
}

/// The loss scale and the steps it skipped, under mixed precision.
fn loss_scale(app: &App, t: &Theme) -> Option<Item> {
    let s = app.run.last_step.as_ref().filter(|s| s.loss_scale.is_some())?;
    Some(Item::new("loss scale", crate::record::text::loss_scale(s), t.fg(t.text)))
}

/// How the streaming loader keeps up; a warning under half a batch ready on average (the
/// replicas wait for data).
fn loader(app: &App, t: &Theme) -> Option<Item> {
    let l = app.run.last_step.as_ref()?.loader?;
    let style = if l.ready < 0.5 { t.fg(t.warning).add_modifier(Modifier::BOLD) } else { t.fg(t.text) };
    Some(Item::new("loader", crate::record::text::loader(&l), style))
}

fn allreduce(info: &RunInfo, t: &Theme) -> Item {
    let value = if info.allreduce.is_empty() { dash() } else { info.allreduce.clone() };
    Item::new("allreduce", value, t.fg(t.text))
}

fn samples_per_sec(app: &App, t: &Theme) -> Item {
    let value = app.run.last_step.as_ref().map_or_else(dash, |s| format!("{:.0}", s.samples_per_sec));
    Item::new("samples/s", value, t.fg(t.text))
}

/// Tokens per second for a run measured in steps over token blocks, else seconds per epoch.
fn rate(app: &App, info: &RunInfo, t: &Theme) -> Item {
    match info.settings.data.block_size.filter(|_| info.settings.recipe.steps.is_some()) {
        Some(block) => Item::new(
            "tokens/s",
            app.run
                .last_step
                .as_ref()
                .map_or_else(dash, |s| format!("{:.0}", s.samples_per_sec * block as f64)),
            t.fg(t.text),
        ),
        None => Item::new(
            "sec/epoch",
            app.run.sec_per_epoch().map_or_else(dash, |v| format!("{v:.1}")),
            t.fg(t.text),
        ),
    }
}

/// Once the model's FLOPs are counted: `MFU 41% (203 TFLOP/s)`, the rate alone without a known
/// peak. The label is in the value, so the item has none.
fn mfu(app: &App, t: &Theme) -> Option<Item> {
    let s = app.run.last_step.as_ref()?;
    let flops = s.model_flops?;
    Some(Item::new("", crate::flops::mfu_label(flops, s.mfu), t.fg(t.text)))
}

fn elapsed(app: &App, t: &Theme) -> Item {
    Item::new("elapsed", hms(app.run.elapsed), t.fg(t.text))
}

/// The time left, while the run goes on.
fn eta(app: &App, t: &Theme) -> Item {
    let value = if app.run.state.is_over() { dash() } else { app.run.eta().map_or_else(dash, hms) };
    Item::new("ETA", value, t.fg(t.text))
}

/// The last evaluation: test accuracy, or for a run without classes the evaluated loss (and
/// its perplexity).
fn evaluation(app: &App, info: &RunInfo, t: &Theme) -> Item {
    let last = app.run.last_epoch.as_ref();
    match info.task.has_classes() {
        true => {
            Item::new("test acc", last.map_or_else(dash, |e| format!("{:.3}", e.test_acc)), t.fg(t.test_acc))
        }
        false => Item::new(
            "val loss",
            last.map_or_else(dash, |e| match info.has_perplexity() {
                true => format!("{:.3} (ppl {:.1})", e.test_loss, e.test_loss.exp()),
                false => format!("{:.3}", e.test_loss),
            }),
            t.fg(t.test_loss),
        ),
    }
}

/// A script run's last evaluation, every figure it reported.
fn script_evaluation(app: &App, t: &Theme) -> Item {
    let value = app.run.last_eval.as_ref().filter(|e| !e.metrics.is_empty()).map_or_else(dash, |e| {
        e.metrics.iter().map(|(k, v)| format!("{k} {v:.4}")).collect::<Vec<_>>().join(", ")
    });
    Item::new("eval", value, t.fg(t.test_acc))
}

/// The step's time and its split into phases. GPU phases come from CUDA events on sampled
/// steps; the label says so beside the figures.
fn step_time(app: &App, info: &RunInfo, t: &Theme) -> Option<Item> {
    let s = app.run.last_step.as_ref()?;
    let label = match (info.timing.starts_with("CUDA"), info.timing.contains("device sync")) {
        (true, _) => "step (CUDA events)",
        (false, true) => "step (synced)",
        _ => "step",
    };
    let total = s.timing.total().max(1e-12);
    let pct = |v: f64| format!("{:.0}%", 100.0 * v / total);
    let value = if s.timed_steps == Some(0) {
        "warm-up, not timed".to_owned()
    } else if info.script.is_some() {
        // The script's own clock times the whole step, on its slowest rank.
        format!("{:.1} ms", 1e3 * s.timing.total())
    } else {
        format!(
            "{:.1} ms = data {} + fwd/bwd {} + allreduce {} + update {}",
            1e3 * s.timing.total(),
            pct(s.timing.data),
            pct(s.timing.compute),
            pct(s.timing.allreduce),
            pct(s.timing.update)
        )
    };
    Some(Item::new(label, value, t.fg(t.text)))
}
