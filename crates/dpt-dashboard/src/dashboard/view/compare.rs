//! Runs compared: the settings in which this run and its baselines differ, with each one's best
//! test accuracy, as a table (in place of the device panel once the run is over, and in the
//! baseline list).

use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::Look;
use crate::dashboard::app::App;
use crate::record::compare::{differing, Best};

/// The colour of baseline `i` (the current run keeps the theme's curve colours).
pub fn baseline_color(look: &Look, i: usize) -> Color {
    let t = look.theme;
    [t.lr, t.util, t.memory, t.accent][i % 4]
}

/// The table's lines: a header naming the runs, then one row per differing setting, then the
/// best evaluation of each (test accuracy, or val loss for runs without classes).
pub fn table_lines(app: &App, look: &Look, cell: usize) -> Vec<Line<'static>> {
    let t = look.theme;
    let fit = |s: &str| {
        let s: String = s.chars().take(cell.saturating_sub(1)).collect();
        format!("{s:<cell$}")
    };
    let own = app
        .curves
        .run_dir
        .as_deref()
        .map_or_else(|| "this run".to_owned(), crate::dashboard::compare::run_name);
    let mut header = vec![Span::styled(fit(""), t.fg(t.dim)), Span::styled(fit(&own), t.fg(t.text))];
    for (i, b) in app.curves.baselines.iter().enumerate() {
        header.push(Span::styled(fit(&b.name), t.fg(baseline_color(look, i))));
    }
    let mut lines = vec![Line::from(header)];
    let mut infos = vec![app.run.info.as_ref()];
    infos.extend(app.curves.baselines.iter().map(|b| b.info.as_ref()));
    for (label, values) in differing(&infos) {
        let mut row = vec![Span::styled(fit(&label), t.fg(t.dim))];
        row.extend(values.iter().map(|v| Span::styled(fit(v), t.fg(t.text))));
        lines.push(Line::from(row));
    }
    // Each run's best evaluation by its own metric: accuracy, or the val loss of runs without
    // classes or that asked for it (named in each cell where both kinds are compared).
    let own_best = Best::of_curves(&app.curves.data, app.run.info.as_ref());
    let bests: Vec<Option<Best>> =
        std::iter::once(own_best).chain(app.curves.baselines.iter().map(|b| b.best)).collect();
    let labels: Vec<&str> = bests.iter().flatten().map(|b| b.label()).collect();
    let mixed = labels.windows(2).any(|w| w[0] != w[1]);
    let label = if mixed { "best" } else { labels.first().copied().unwrap_or("best test acc") };
    let mut row = vec![Span::styled(fit(label), t.fg(t.dim))];
    row.extend(
        bests.iter().map(|b| Span::styled(fit(&b.map_or("-".to_owned(), |b| b.cell(mixed))), t.fg(t.text))),
    );
    lines.push(Line::from(row));
    lines
}

/// The comparison table in a panel.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look) {
    let block = look.panel(format!("compare {} {} runs", look.sep(), app.curves.baselines.len() + 1));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let cell = (inner.width as usize / (app.curves.baselines.len() + 2)).clamp(6, 24);
    frame.render_widget(Paragraph::new(table_lines(app, look, cell)), inner);
}
