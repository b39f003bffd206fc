//! Windows over the dashboard: the key help, the lr and folder prompts, the quit confirmation.

use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::Look;
use crate::dashboard::app::{App, Overlay, PromptKind};
use crate::dashboard::keys::HELP;

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let [row] =
        Layout::vertical([Constraint::Length(height.min(area.height))]).flex(Flex::Center).areas(area);
    let [cell] =
        Layout::horizontal([Constraint::Length(width.min(area.width))]).flex(Flex::Center).areas(row);
    cell
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look) {
    let t = look.theme;
    let Some(overlay) = &app.overlay else { return };
    let (title, lines, width): (&str, Vec<Line>, u16) = match overlay {
        Overlay::Help => {
            let lines = HELP
                .iter()
                .map(|(k, what)| {
                    Line::from(vec![
                        Span::styled(format!("{k:>10}  "), t.fg(t.accent)),
                        Span::styled(*what, t.fg(t.text)),
                    ])
                })
                .collect();
            ("keys", lines, 84)
        }
        Overlay::Prompt { kind, input, error } => {
            let (title, question, enter) = match kind {
                PromptKind::Lr => (
                    "set the learning rate",
                    format!(
                        "current lr {}; a positive number:",
                        app.lr.map_or("-".to_owned(), |v| format!("{v}"))
                    ),
                    "Enter applies, Esc cancels",
                ),
                PromptKind::SaveDir => (
                    "save into another folder",
                    "save weights and checkpoints into this folder:".to_owned(),
                    "Enter saves there now, Esc cancels",
                ),
            };
            let cursor = if look.ascii { "_" } else { "▏" };
            let mut lines = vec![
                Line::from(Span::styled(question, t.fg(t.dim))),
                Line::from(vec![
                    Span::styled(format!("> {input}"), t.fg(t.text)),
                    Span::styled(cursor, t.fg(t.accent)),
                ]),
            ];
            if let Some(e) = error {
                lines.push(Line::from(Span::styled(e.clone(), t.fg(t.error))));
            }
            lines.push(Line::from(Span::styled(enter, t.fg(t.dim))));
            (title, lines, 70)
        }
        Overlay::Baselines { entries, cursor } => {
            let mut lines: Vec<Line> = entries
                .iter()
                .enumerate()
                .map(|(i, path)| {
                    let name = crate::dashboard::compare::run_name(path);
                    let on = app.baselines.iter().position(|b| b.name == name);
                    let mark = if on.is_some() { "[x] " } else { "[ ] " };
                    let style = match on {
                        Some(k) => t.fg(super::compare::baseline_color(look, k)),
                        None => t.fg(t.text),
                    };
                    let style = if i == *cursor {
                        style.add_modifier(ratatui::style::Modifier::REVERSED)
                    } else {
                        style
                    };
                    Line::from(Span::styled(format!("{mark}{name}"), style))
                })
                .collect();
            lines.push(Line::from(Span::styled(
                "Enter/space overlays or removes, arrows move, Esc closes",
                t.fg(t.dim),
            )));
            if !app.baselines.is_empty() {
                lines.push(Line::from(""));
                lines.extend(super::compare::table_lines(app, look, 16));
            }
            ("compare with recorded runs", lines, 96)
        }
        Overlay::ConfirmQuit => (
            "stop training?",
            vec![
                Line::from(Span::styled("Stop after the current step and save the weights?", t.fg(t.text))),
                Line::from(vec![
                    Span::styled(" y ", t.highlight()),
                    Span::styled(" stop and save   ", t.fg(t.text)),
                    Span::styled(" n ", t.highlight()),
                    Span::styled(" keep training", t.fg(t.text)),
                ]),
            ],
            56,
        ),
    };
    let rect = centered(area, width, lines.len() as u16 + 2);
    let block = look.panel(title);
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(block).wrap(Wrap { trim: false }), rect);
}
