//! Windows over the dashboard: the key help, the lr and folder prompts, the quit confirmation,
//! the last evaluation by class, the rewind picker (`rewind.rs`).

use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::Look;
use crate::dashboard::app::{App, Overlay, PromptKind};
use crate::dashboard::keys::help;

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
            let lines = help()
                .map(|(k, what)| {
                    Line::from(vec![
                        Span::styled(format!("{k:>10}  "), t.fg(t.accent)),
                        Span::styled(what, t.fg(t.text)),
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
                        app.run.lr.map_or("-".to_owned(), |v| format!("{v}"))
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
                    let on = app.curves.baselines.iter().position(|b| b.name == name);
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
            if !app.curves.baselines.is_empty() {
                lines.push(Line::from(""));
                lines.extend(super::compare::table_lines(app, look, 16));
            }
            ("compare with recorded runs", lines, 96)
        }
        Overlay::Classes => ("by class", class_lines(app, look), 84),
        Overlay::Rewind(picker) => super::rewind::lines(app, look, picker),
        Overlay::ConfirmQuit => {
            // A script's stop is its loop's own: it saves what the script saves on its way out.
            let script = app.run.info.as_ref().is_some_and(|i| i.script.is_some());
            let (question, yes) = if script {
                ("Stop the script after its current step?", " stop   ")
            } else {
                ("Stop after the current step and save the weights?", " stop and save   ")
            };
            (
                "stop training?",
                vec![
                    Line::from(Span::styled(question, t.fg(t.text))),
                    Line::from(vec![
                        Span::styled(" y ", t.highlight()),
                        Span::styled(yes, t.fg(t.text)),
                        Span::styled(" n ", t.highlight()),
                        Span::styled(" keep training", t.fg(t.text)),
                    ]),
                ],
                56,
            )
        }
    };
    let rect = centered(area, width, lines.len() as u16 + 2);
    let block = look.panel(title);
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(block).wrap(Wrap { trim: false }), rect);
}

/// The last evaluation by class: each class's accuracy beside its row of confusion counts
/// (label down, prediction across), most confused cells in the warning colour.
fn class_lines(app: &App, look: &Look) -> Vec<Line<'static>> {
    let t = look.theme;
    let Some(e) = &app.run.last_epoch else {
        return vec![Line::from(Span::styled("no evaluation yet (one per epoch)", t.fg(t.dim)))];
    };
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "epoch {}: test acc {:.3}{}",
            e.epoch,
            e.test_acc,
            e.top5_acc.map_or(String::new(), |a| format!(", top-5 {a:.3}"))
        ),
        t.fg(t.text),
    ))];
    let Some(per_class) = &e.per_class_acc else {
        lines.push(Line::from(Span::styled("this run's record has no breakdown by class", t.fg(t.dim))));
        return lines;
    };
    let acc = |a: &Option<f64>| a.map_or("  -  ".to_owned(), |a| format!("{a:.3}"));
    match &e.confusion {
        Some(rows) if rows.len() <= 16 => {
            let width = rows.iter().flatten().max().map_or(1, |m| m.to_string().len()).max(2);
            let mut head = vec![Span::styled("class   acc  ".to_owned(), t.fg(t.dim))];
            head.extend((0..rows.len()).map(|k| Span::styled(format!(" {k:>width$}"), t.fg(t.dim))));
            lines.push(Line::from(head));
            for (k, row) in rows.iter().enumerate() {
                let total: u64 = row.iter().sum();
                let mut spans = vec![Span::styled(
                    format!("{k:>5} {}  ", acc(per_class.get(k).unwrap_or(&None))),
                    t.fg(t.text),
                )];
                spans.extend(row.iter().enumerate().map(|(j, n)| {
                    let style = if j == k {
                        t.fg(t.accent)
                    } else if *n > 0 && *n * 10 >= total {
                        t.fg(t.warning)
                    } else {
                        t.fg(t.dim)
                    };
                    Span::styled(format!(" {n:>width$}"), style)
                }));
                lines.push(Line::from(spans));
            }
            lines.push(Line::from(Span::styled(
                "rows: label, columns: prediction; a tenth of a class or more mistaken in the warning colour",
                t.fg(t.dim),
            )));
        }
        _ => {
            // Too many classes for a matrix on screen: the accuracies, eight to a line.
            for (i, chunk) in per_class.chunks(8).enumerate() {
                let text: Vec<String> =
                    chunk.iter().enumerate().map(|(j, a)| format!("{:>4} {}", i * 8 + j, acc(a))).collect();
                lines.push(Line::from(Span::styled(text.join("  "), t.fg(t.text))));
            }
        }
    }
    lines
}
