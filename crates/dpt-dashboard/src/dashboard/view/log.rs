//! The event log pane.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::Look;
use crate::dashboard::app::App;
use crate::dashboard::log::Level;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look) {
    let t = look.theme;
    let block = look.panel("log");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines: Vec<Line> = app
        .log
        .tail(inner.height as usize)
        .map(|l| {
            let color = match l.level {
                Level::Info => t.text,
                Level::Warn => t.warning,
                Level::Error => t.error,
            };
            Line::from(vec![
                Span::styled(format!("{} ", l.time), t.fg(t.dim)),
                Span::styled(l.text.clone(), t.fg(color)),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}
