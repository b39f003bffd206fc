//! The curve panel: train loss, train accuracy and test accuracy (with the weights' EMA; for a
//! run without classes, perplexity), or the lr over its planned schedule, or the gradient norm,
//! against epochs (evaluation periods of a run measured in steps), with a legend and the marks
//! where the lr changed, training paused or a rewind went back to (the branch it abandoned
//! dimmed).

use std::borrow::Cow;

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

/// A curve's points: the record's own, or worked out for the view (perplexity).
type Points<'a> = Cow<'a, [(f64, f64)]>;

/// A series with its legend name and colour.
type Named<'a> = (&'a str, Points<'a>, Color);

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

/// One curve view in `area`: a titled panel, the legend on its first row, the plot under it.
fn draw_view(frame: &mut Frame, area: Rect, app: &App, look: &Look, view: CurveView) {
    let block = look.panel(title(app, look, view));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.height < 3 {
        return;
    }
    let shown = Shown::new(app, look, view);
    let [legend_area, plot_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(inner);
    frame.render_widget(legend(app, look, &shown), legend_area);
    draw_plot(frame, plot_area, app, look, view, &shown);
}

/// Whether `view` plots y on a log scale (the loss, when asked for).
fn log_y(app: &App, view: CurveView) -> bool {
    app.curves.settings.log_loss && view == CurveView::Loss
}

/// `loss (log) · last 20 epochs · smooth 0.6`: what is plotted, over which window, smoothed how.
fn title(app: &App, look: &Look, view: CurveView) -> String {
    let c = &app.curves.data;
    let s = app.curves.settings;
    let (unit, per_x) = c.x_unit();
    let window = match s.recent {
        Some(w) => format!("last {} {unit}s", w * per_x),
        None => "whole run".to_owned(),
    };
    let weight = s.smoothing_weight();
    let smoothing = if weight > 0.0 { format!(" {} smooth {weight}", look.sep()) } else { String::new() };
    let scalar_name;
    let name = match (c.no_classes && view == CurveView::Accuracy, c.has_perplexity) {
        (true, true) => "perplexity",
        (true, false) => "loss",
        (false, _) if view == CurveView::Scalars => {
            scalar_name = match scalar(c, s.scalar) {
                Some((n, _)) => {
                    format!("{n} ({} of {}, n: next)", s.scalar % c.scalars.len() + 1, c.scalars.len())
                }
                None => "scalars (none reported)".to_owned(),
            };
            scalar_name.as_str()
        }
        (false, _) => view.title(),
    };
    let log = if log_y(app, view) { " (log)" } else { "" };
    format!("{name}{log} {} {window}{smoothing}", look.sep())
}

/// The curves one view plots: the run's own (named in the legend), the baselines' and the
/// abandoned branches'.
struct Shown<'a> {
    own: Vec<Named<'a>>,
    baselines: Vec<(Points<'a>, Color)>,
    abandoned: Vec<Points<'a>>,
}

impl<'a> Shown<'a> {
    fn new(app: &'a App, look: &Look, view: CurveView) -> Self {
        Shown {
            own: own_series(&app.curves.data, look, view, app.curves.settings.scalar),
            baselines: baseline_series(app, look, view),
            abandoned: abandoned_series(app, view),
        }
    }
}

/// The run's own curves for `view`, with their legend names and colours.
fn own_series<'a>(c: &'a Curves, look: &Look, view: CurveView, scalar_index: usize) -> Vec<Named<'a>> {
    let t = look.theme;
    let loss = || {
        vec![
            ("train loss", Points::from(&c.train_loss), t.train_loss),
            ("test loss", Points::from(&c.test_loss), t.test_loss),
        ]
    };
    match view {
        CurveView::D2l if c.no_classes => loss(),
        CurveView::Accuracy if c.no_classes && c.has_perplexity => {
            let [train, test] = c.perplexity();
            vec![
                ("train ppl", Points::from(train), t.train_acc),
                ("test ppl", Points::from(test), t.test_acc),
            ]
        }
        // A regression's or a segmentation's loss has no perplexity: the loss again.
        CurveView::Accuracy if c.no_classes => loss(),
        CurveView::Loss => loss(),
        CurveView::Accuracy if !c.ema_test_acc.is_empty() => vec![
            ("train acc", Points::from(&c.train_acc), t.train_acc),
            ("test acc", Points::from(&c.test_acc), t.test_acc),
            ("test acc (EMA)", Points::from(&c.ema_test_acc), t.accent),
        ],
        CurveView::Accuracy => vec![
            ("train acc", Points::from(&c.train_acc), t.train_acc),
            ("test acc", Points::from(&c.test_acc), t.test_acc),
        ],
        CurveView::D2l => vec![
            ("train loss", Points::from(&c.train_loss), t.train_loss),
            ("train acc", Points::from(&c.train_acc), t.train_acc),
            ("test acc", Points::from(&c.test_acc), t.test_acc),
        ],
        CurveView::Lr if !c.lr_plan.is_empty() => {
            vec![("planned", Points::from(&c.lr_plan), t.dim), ("lr", Points::from(&c.lr), t.lr)]
        }
        CurveView::Lr => vec![("lr", Points::from(&c.lr), t.lr)],
        CurveView::GradNorm => vec![("grad norm", Points::from(&c.grad_norm), t.accent)],
        CurveView::Scalars => scalar(c, scalar_index)
            .map(|(name, points)| vec![(name, Points::from(points), t.accent)])
            .unwrap_or_default(),
    }
}

/// The named figure the scalars view shows: the `index`th by name (wrapping).
fn scalar(c: &Curves, index: usize) -> Option<(&str, &[(f64, f64)])> {
    let count = c.scalars.len();
    (count > 0)
        .then(|| c.scalars.iter().nth(index % count))
        .flatten()
        .map(|(n, p)| (n.as_str(), p.as_slice()))
}

/// Baselines: every curve of a recorded run in that run's one colour (then, in the accuracy
/// view, the perplexity of those without classes).
fn baseline_series<'a>(app: &'a App, look: &Look, view: CurveView) -> Vec<(Points<'a>, Color)> {
    let baselines = &app.curves.baselines;
    let colour = |i| super::compare::baseline_color(look, i);
    let mut series: Vec<(Points, Color)> = baselines
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            view_series(&b.curves, view).into_iter().map(move |p| (Points::from(p), colour(i)))
        })
        .collect();
    if view == CurveView::Accuracy {
        series.extend(
            baselines
                .iter()
                .enumerate()
                .filter(|(_, b)| b.curves.no_classes && b.curves.has_perplexity)
                .flat_map(|(i, b)| b.curves.perplexity().map(|p| (Points::from(p), colour(i)))),
        );
    }
    series
}

/// The branches a rewind abandoned, the run's and then the baselines', dimmed under the run's
/// own curves.
fn abandoned_series(app: &App, view: CurveView) -> Vec<Points<'_>> {
    let c = &app.curves.data;
    let own: Vec<Points> = match view {
        CurveView::Accuracy if c.no_classes && c.has_perplexity => {
            c.abandoned.iter().flat_map(|b| b.perplexity().map(Points::from)).collect()
        }
        CurveView::Accuracy if c.no_classes => c
            .abandoned
            .iter()
            .flat_map(|b| [Points::from(&b.train_loss), Points::from(&b.test_loss)])
            .collect(),
        _ => c.abandoned.iter().flat_map(|b| view_series(b, view)).map(Points::from).collect(),
    };
    let baselines = app
        .curves
        .baselines
        .iter()
        .flat_map(|b| b.curves.abandoned.iter().flat_map(|a| view_series(a, view)))
        .map(Points::from);
    own.into_iter().chain(baselines).collect()
}

/// The legend row: the run's curves, the baselines by name, the abandoned branches (when there
/// are any), then the marks.
fn legend<'a>(app: &'a App, look: &Look, shown: &Shown) -> Line<'a> {
    let t = look.theme;
    let marker = if look.ascii { "*" } else { "━" };
    let mut legend = Vec::new();
    for (name, _, color) in &shown.own {
        legend.push(Span::styled(format!(" {marker} "), t.fg(*color)));
        legend.push(Span::styled(format!("{name} "), t.fg(t.text)));
    }
    for (i, b) in app.curves.baselines.iter().enumerate() {
        legend.push(Span::styled(format!(" {marker} "), t.fg(super::compare::baseline_color(look, i))));
        legend.push(Span::styled(format!("{} ", b.name), t.fg(t.dim)));
    }
    if shown.abandoned.iter().any(|s| !s.is_empty()) {
        legend.push(Span::styled(format!(" {marker} "), t.fg(t.dim)));
        legend.push(Span::styled("abandoned ", t.fg(t.dim)));
    }
    let mark = if look.ascii { ":" } else { "┊" };
    if app.curves.data.marks.iter().any(|(_, k)| *k == MarkKind::Rewind) {
        legend.push(Span::styled(format!(" {mark}"), t.fg(t.warning)));
        legend.push(Span::styled(" rewind", t.fg(t.dim)));
    }
    legend.push(Span::styled(format!(" {mark}"), t.fg(t.lr_mark)));
    legend.push(Span::styled(" lr change ", t.fg(t.dim)));
    legend.push(Span::styled(mark.to_string(), t.fg(t.pause_mark)));
    legend.push(Span::styled(" pause", t.fg(t.dim)));
    Line::from(legend)
}

/// The plot of `shown` over the window, or a line saying no report came yet. With smoothing,
/// each of the run's raw curves is drawn faint first and its smoothed curve over it.
fn draw_plot(frame: &mut Frame, area: Rect, app: &App, look: &Look, view: CurveView, shown: &Shown) {
    let t = look.theme;
    let c = &app.curves.data;
    let s = app.curves.settings;
    let log = log_y(app, view);
    let x = x_range(c, s.recent);
    let all: Vec<&[(f64, f64)]> = (shown.own.iter().map(|(_, p, _)| p.as_ref()))
        .chain(shown.baselines.iter().map(|(p, _)| p.as_ref()))
        .chain(shown.abandoned.iter().map(AsRef::as_ref))
        .collect();
    let Some(y) = y_range(&all, x, log) else {
        let msg = Paragraph::new(Span::styled(
            "  no data yet: the first report comes after --log-every steps",
            t.fg(t.dim),
        ));
        frame.render_widget(msg, area);
        return;
    };
    let weight = s.smoothing_weight();
    let smoothed: Vec<Points> = shown.own.iter().map(|(_, p, _)| ema(p, weight)).collect();
    let smoothed_baselines: Vec<Points> = shown.baselines.iter().map(|(p, _)| ema(p, weight)).collect();
    let smoothed_abandoned: Vec<Points> = shown.abandoned.iter().map(|p| ema(p, weight)).collect();
    let mut lines: Vec<Series> =
        smoothed_abandoned.iter().map(|points| Series { points, color: t.dim }).collect();
    lines.extend(
        shown
            .baselines
            .iter()
            .zip(&smoothed_baselines)
            .map(|((_, color), points)| Series { points, color: *color }),
    );
    if weight > 0.0 {
        lines.extend(shown.own.iter().map(|(_, points, _)| Series { points, color: t.dim }));
    }
    lines.extend(
        shown.own.iter().zip(&smoothed).map(|((_, _, color), points)| Series { points, color: *color }),
    );
    let plot = Plot {
        series: lines,
        x,
        x_scale: c.x_unit().1,
        y,
        log_y: log,
        marks: marks(c, look),
        ascii: look.ascii,
        axis_style: t.fg(t.dim),
    };
    plot.render(area, frame.buffer_mut());
}

/// Where the lr changed, training paused or a rewind went back to, each in its colour.
fn marks(c: &Curves, look: &Look) -> Vec<(f64, Color)> {
    let t = look.theme;
    let colour = |kind: &MarkKind| match kind {
        MarkKind::Pause => t.pause_mark,
        MarkKind::LrChange => t.lr_mark,
        MarkKind::Rewind => t.warning,
    };
    c.marks.iter().map(|(x, kind)| (*x, colour(kind))).collect()
}

/// The curves of `c` that `view` shows (a baseline's, drawn under the run's own).
fn view_series(c: &Curves, view: CurveView) -> Vec<&[(f64, f64)]> {
    match view {
        CurveView::Loss => vec![&c.train_loss, &c.test_loss],
        CurveView::Accuracy => vec![&c.train_acc, &c.test_acc, &c.ema_test_acc],
        CurveView::D2l => vec![&c.train_loss, &c.train_acc, &c.test_acc],
        CurveView::Lr => vec![&c.lr, &c.lr_plan],
        CurveView::GradNorm => vec![&c.grad_norm],
        // A baseline's figures need not share the run's names.
        CurveView::Scalars => Vec::new(),
    }
}
