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
use crate::record::compare::differing;

/// The colour of baseline `i` (the current run keeps the theme's curve colours).
pub fn baseline_color(look: &Look, i: usize) -> Color {
    let t = look.theme;
    [t.lr, t.util, t.memory, t.accent][i % 4]
}

/// The table's lines: a header naming the runs, then one row per differing setting, then the
/// best test accuracy of each.
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
    let best = app
        .curves
        .data
        .test_acc
        .iter()
        .map(|p| p.1)
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |b| b.max(a))));
    let acc = |a: Option<f64>| a.map_or("-".to_owned(), |a| format!("{a:.3}"));
    let mut row =
        vec![Span::styled(fit("best test acc"), t.fg(t.dim)), Span::styled(fit(&acc(best)), t.fg(t.text))];
    row.extend(app.curves.baselines.iter().map(|b| Span::styled(fit(&acc(b.best_test_acc)), t.fg(t.text))));
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
