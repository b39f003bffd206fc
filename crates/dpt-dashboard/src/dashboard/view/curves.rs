//! The curve panel: train loss, train accuracy and test accuracy (with the weights' EMA; for a
//! run without classes, perplexity), or the lr over its planned schedule, or the gradient norm,
//! against epochs (evaluation periods of a run measured in steps), with a legend and the marks
//! where the lr changed, training paused or a rewind went back to (the branch it abandoned
//! dimmed).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};
use ratatui::Frame;

use super::plot::{Plot, Series};
use super::Look;
use crate::dashboard::app::App;
use crate::dashboard::curves::CurveView;
use crate::record::curves::{x_range, y_range, Curves, MarkKind};
use crate::record::smooth::ema;

/// A series with its legend name and colour.
type Named<'a> = (&'static str, &'a [(f64, f64)], Color);

/// A run's train and test perplexity curves.
type Perplexity = [Vec<(f64, f64)>; 2];

/// Terminals at least this wide show loss and accuracy side by side.
pub const SIDE_BY_SIDE_WIDTH: u16 = 160;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look) {
    let view = app.curves.settings.view;
    let wide = frame.area().width >= SIDE_BY_SIDE_WIDTH;
    if wide && matches!(view, CurveView::Loss | CurveView::Accuracy) {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
        draw_view(frame, left, app, look, CurveView::Loss);
        draw_view(frame, right, app, look, CurveView::Accuracy);
    } else {
        draw_view(frame, area, app, look, view);
    }
}

fn draw_view(frame: &mut Frame, area: Rect, app: &App, look: &Look, view: CurveView) {
    let t = look.theme;
    let c = &app.curves.data;
    let s = app.curves.settings;
    let log = s.log_loss && view == CurveView::Loss;
    let (unit, per_x) = c.x_unit();
    let window = match s.recent {
        Some(w) => format!("last {} {unit}s", w * per_x),
        None => "whole run".to_owned(),
    };
    let weight = s.smoothing_weight();
    let smoothing = if weight > 0.0 { format!(" {} smooth {weight}", look.sep()) } else { String::new() };
    let name = match (c.no_classes && view == CurveView::Accuracy, c.has_perplexity) {
        (true, true) => "perplexity",
        (true, false) => "loss",
        (false, _) => view.title(),
    };
    let title = format!("{name}{} {} {window}{smoothing}", if log { " (log)" } else { "" }, look.sep());
    let block = look.panel(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.height < 3 {
        return;
    }
    let ppl = c.perplexity();
    let series: Vec<Named> = match view {
        CurveView::D2l if c.no_classes => {
            vec![("train loss", &c.train_loss, t.train_loss), ("test loss", &c.test_loss, t.test_loss)]
        }
        CurveView::Accuracy if c.no_classes && c.has_perplexity => {
            vec![("train ppl", &ppl[0], t.train_acc), ("test ppl", &ppl[1], t.test_acc)]
        }
        // A regression's or a segmentation's loss has no perplexity: the loss again.
        CurveView::Accuracy if c.no_classes => {
            vec![("train loss", &c.train_loss, t.train_loss), ("test loss", &c.test_loss, t.test_loss)]
        }
        CurveView::Loss => {
            vec![("train loss", &c.train_loss, t.train_loss), ("test loss", &c.test_loss, t.test_loss)]
        }
        CurveView::Accuracy if !c.ema_test_acc.is_empty() => vec![
            ("train acc", &c.train_acc, t.train_acc),
            ("test acc", &c.test_acc, t.test_acc),
            ("test acc (EMA)", &c.ema_test_acc, t.accent),
        ],
        CurveView::Accuracy => {
            vec![("train acc", &c.train_acc, t.train_acc), ("test acc", &c.test_acc, t.test_acc)]
        }
        CurveView::D2l => vec![
            ("train loss", &c.train_loss, t.train_loss),
            ("train acc", &c.train_acc, t.train_acc),
            ("test acc", &c.test_acc, t.test_acc),
        ],
        CurveView::Lr if !c.lr_plan.is_empty() => vec![("planned", &c.lr_plan, t.dim), ("lr", &c.lr, t.lr)],
        CurveView::Lr => vec![("lr", &c.lr, t.lr)],
        CurveView::GradNorm => vec![("grad norm", &c.grad_norm, t.accent)],
    };
    let marker = if look.ascii { "*" } else { "━" };
    let mut legend = Vec::new();
    for (name, _, color) in &series {
        legend.push(Span::styled(format!(" {marker} "), t.fg(*color)));
        legend.push(Span::styled(format!("{name} "), t.fg(t.text)));
    }
    // Baselines: every curve of a recorded run in that run's one colour, named once.
    let baseline_series: Vec<(&[(f64, f64)], Color)> = app
        .curves
        .baselines
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let color = super::compare::baseline_color(look, i);
            view_series(&b.curves, view).into_iter().map(move |p| (p, color))
        })
        .collect();
    let baseline_ppl: Vec<(Perplexity, Color)> = match view {
        CurveView::Accuracy => app
            .curves
            .baselines
            .iter()
            .enumerate()
            .filter(|(_, b)| b.curves.no_classes && b.curves.has_perplexity)
            .map(|(i, b)| (b.curves.perplexity(), super::compare::baseline_color(look, i)))
            .collect(),
        _ => Vec::new(),
    };
    let mut baseline_series = baseline_series;
    baseline_series
        .extend(baseline_ppl.iter().flat_map(|(p, color)| p.iter().map(|s| (s.as_slice(), *color))));
    for (i, b) in app.curves.baselines.iter().enumerate() {
        legend.push(Span::styled(format!(" {marker} "), t.fg(super::compare::baseline_color(look, i))));
        legend.push(Span::styled(format!("{} ", b.name), t.fg(t.dim)));
    }
    // The branches a rewind abandoned, dimmed under the run's own curves.
    let abandoned_ppl: Vec<Perplexity> = match view {
        CurveView::Accuracy if c.no_classes && c.has_perplexity => {
            c.abandoned.iter().map(Curves::perplexity).collect()
        }
        _ => Vec::new(),
    };
    let abandoned: Vec<&[(f64, f64)]> = match view {
        CurveView::Accuracy if c.no_classes && c.has_perplexity => {
            abandoned_ppl.iter().flat_map(|p| p.iter().map(Vec::as_slice)).collect()
        }
        CurveView::Accuracy if c.no_classes => {
            c.abandoned.iter().flat_map(|b| [b.train_loss.as_slice(), b.test_loss.as_slice()]).collect()
        }
        _ => c.abandoned.iter().flat_map(|b| view_series(b, view)).collect(),
    };
    // A baseline's abandoned branches, dimmed too.
    let abandoned: Vec<&[(f64, f64)]> = abandoned
        .into_iter()
        .chain(
            app.curves
                .baselines
                .iter()
                .flat_map(|b| b.curves.abandoned.iter().flat_map(|a| view_series(a, view))),
        )
        .collect();
    if abandoned.iter().any(|s| !s.is_empty()) {
        legend.push(Span::styled(format!(" {marker} "), t.fg(t.dim)));
        legend.push(Span::styled("abandoned ", t.fg(t.dim)));
    }
    let mark = if look.ascii { ":" } else { "┊" };
    if c.marks.iter().any(|(_, k)| *k == MarkKind::Rewind) {
        legend.push(Span::styled(format!(" {mark}"), t.fg(t.warning)));
        legend.push(Span::styled(" rewind", t.fg(t.dim)));
    }
    legend.push(Span::styled(format!(" {mark}"), t.fg(t.lr_mark)));
    legend.push(Span::styled(" lr change ", t.fg(t.dim)));
    legend.push(Span::styled(mark.to_string(), t.fg(t.pause_mark)));
    legend.push(Span::styled(" pause", t.fg(t.dim)));
    frame.render_widget(Paragraph::new(Line::from(legend)), Rect { height: 1, ..inner });
    let plot_area = Rect { y: inner.y + 1, height: inner.height - 1, ..inner };

    let x = x_range(c, s.recent);
    let mut slices: Vec<&[(f64, f64)]> = series.iter().map(|(_, p, _)| *p).collect();
    slices.extend(baseline_series.iter().map(|(p, _)| *p));
    slices.extend(abandoned.iter().copied());
    let Some(y) = y_range(&slices, x, log) else {
        let msg = Paragraph::new(Span::styled(
            "  no data yet: the first report comes after --log-every steps",
            t.fg(t.dim),
        ));
        frame.render_widget(msg, plot_area);
        return;
    };
    let marks = c
        .marks
        .iter()
        .map(|(mx, kind)| {
            let color = match kind {
                MarkKind::Pause => t.pause_mark,
                MarkKind::LrChange => t.lr_mark,
                MarkKind::Rewind => t.warning,
            };
            (*mx, color)
        })
        .collect();
    // With smoothing, each raw curve is drawn faint first and its smoothed curve over it.
    let smoothed: Vec<std::borrow::Cow<[(f64, f64)]>> =
        series.iter().map(|(_, p, _)| ema(p, weight)).collect();
    let smoothed_baselines: Vec<std::borrow::Cow<[(f64, f64)]>> =
        baseline_series.iter().map(|(p, _)| ema(p, weight)).collect();
    let smoothed_abandoned: Vec<std::borrow::Cow<[(f64, f64)]>> =
        abandoned.iter().map(|p| ema(p, weight)).collect();
    let mut lines: Vec<Series> =
        smoothed_abandoned.iter().map(|points| Series { points, color: t.dim }).collect();
    lines.extend(
        baseline_series
            .iter()
            .zip(&smoothed_baselines)
            .map(|((_, color), points)| Series { points, color: *color }),
    );
    if weight > 0.0 {
        lines.extend(series.iter().map(|(_, points, _)| Series { points, color: t.dim }));
    }
    lines
        .extend(series.iter().zip(&smoothed).map(|((_, _, color), points)| Series { points, color: *color }));
    let plot = Plot {
        series: lines,
        x,
        x_scale: per_x,
        y,
        log_y: log,
        marks,
        ascii: look.ascii,
        axis_style: t.fg(t.dim),
    };
    plot.render(plot_area, frame.buffer_mut());
}

/// The curves of `c` that `view` shows (a baseline's, drawn under the run's own).
fn view_series(c: &Curves, view: CurveView) -> Vec<&[(f64, f64)]> {
    match view {
        CurveView::Loss => vec![&c.train_loss, &c.test_loss],
        CurveView::Accuracy => vec![&c.train_acc, &c.test_acc, &c.ema_test_acc],
        CurveView::D2l => vec![&c.train_loss, &c.train_acc, &c.test_acc],
        CurveView::Lr => vec![&c.lr, &c.lr_plan],
        CurveView::GradNorm => vec![&c.grad_norm],
    }
}
