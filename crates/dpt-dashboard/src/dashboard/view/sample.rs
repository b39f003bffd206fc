//! The latest sample of a language model, under the curves: its prompt (dim) and the
//! continuation it wrote, wrapped; line breaks and other control characters shown as marks so
//! that a few rows hold the whole sample.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::Look;
use crate::dashboard::app::App;

/// Text rows the panel gives the sample (plus its two border rows).
pub fn rows(compact: bool) -> u16 {
    if compact {
        2
    } else {
        4
    }
}

/// `text` on one line: a line break as `↵` (`|` in ASCII), a tab as a space, other control
/// characters as `·` (`.`).
pub fn printable(text: &str, ascii: bool) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => {
                if ascii {
                    '|'
                } else {
                    '↵'
                }
            }
            '\t' => ' ',
            c if c.is_control() => {
                if ascii {
                    '.'
                } else {
                    '·'
                }
            }
            c if ascii && !c.is_ascii() => '?',
            c => c,
        })
        .collect()
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look) {
    let Some((step, prompt, text)) = &app.run.sample else { return };
    let t = look.theme;
    let block = look.panel(format!("sample at step {step}"));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let line = Line::from(vec![
        Span::styled(printable(prompt, look.ascii), t.fg(t.dim)),
        Span::styled(printable(text, look.ascii), t.fg(t.text)),
    ]);
    frame.render_widget(Paragraph::new(line).wrap(Wrap { trim: false }), inner);
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_become_marks() {
        assert_eq!(printable("a\nb\tc\u{7}", false), "a↵b c·");
        assert_eq!(printable("a\nb\u{7}é", true), "a|b.?");
    }
}
