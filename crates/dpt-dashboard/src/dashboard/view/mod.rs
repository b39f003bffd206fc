//! Drawing: a pure function of the state and the theme. Layouts for 80×24 (compact) and larger
//! terminals; below the minimum, a message asking for a larger terminal.

mod compare;
mod curves;
mod devices;
mod log;
mod overlay;
pub mod plot;
mod rewind;
mod sample;
mod status;

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::symbols::border;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

use super::app::App;
use super::theme::Theme;

/// The smallest terminal the dashboard draws in.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 18;

/// How to draw: the theme and whether only ASCII may be used.
pub struct Look<'a> {
    pub theme: &'a Theme,
    pub ascii: bool,
}

const ASCII_BORDER: border::Set = border::Set {
    top_left: "+",
    top_right: "+",
    bottom_left: "+",
    bottom_right: "+",
    vertical_left: "|",
    vertical_right: "|",
    horizontal_top: "-",
    horizontal_bottom: "-",
};

impl Look<'_> {
    /// A bordered panel with a title.
    pub fn panel<'b>(&self, title: impl std::fmt::Display) -> Block<'b> {
        let title = Line::from(format!(" {title} "));
        Block::default()
            .borders(Borders::ALL)
            .border_set(if self.ascii { ASCII_BORDER } else { border::ROUNDED })
            .border_style(self.theme.fg(self.theme.border))
            .title(title.style(self.theme.title()))
    }

    /// The separator between parts of a title.
    pub fn sep(&self) -> &'static str {
        if self.ascii {
            "-"
        } else {
            "·"
        }
    }

    /// A horizontal bar `width` cells wide, `fraction` full.
    pub fn bar(&self, fraction: f64, width: usize) -> (String, String) {
        let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
        let (full, empty) = if self.ascii { ("#", "-") } else { ("█", "░") };
        (full.repeat(filled), empty.repeat(width - filled))
    }
}

/// Draws the whole dashboard.
pub fn draw(frame: &mut Frame, app: &App, look: &Look) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(frame, area, look);
        return;
    }
    let compact = area.width < 100 || area.height < 30;
    let log_rows = if compact { 5 } else { 8 };
    let [status_area, main_area, log_area, footer_area] = Layout::vertical([
        Constraint::Length(3 + status::verdict_rows(app, area.width)),
        Constraint::Min(8),
        Constraint::Length(log_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    let device_width = if compact { 30 } else { (area.width * 2 / 5).min(60) };
    let [curve_area, device_area] =
        Layout::horizontal([Constraint::Min(30), Constraint::Length(device_width)]).areas(main_area);
    status::draw(frame, status_area, app, look, compact);
    // A language model's latest sample goes under the curves, when they keep room to be read.
    let sample_height = sample::rows(compact) + 2;
    if app.run.sample.is_some() && curve_area.height >= 10 + sample_height {
        let [curves, sample] =
            Layout::vertical([Constraint::Min(10), Constraint::Length(sample_height)]).areas(curve_area);
        curves::draw(frame, curves, app, look);
        sample::draw(frame, sample, app, look);
    } else {
        curves::draw(frame, curve_area, app, look);
    }
    // A finished run (or `show`) compared with baselines: the table in place of the devices.
    if !app.curves.baselines.is_empty() && (app.run.state.is_over() || !app.viewer.steerable) {
        compare::draw(frame, device_area, app, look);
    } else {
        devices::draw(frame, device_area, app, look, compact);
    }
    log::draw(frame, log_area, app, look);
    footer(frame, footer_area, app, look, compact);
    overlay::draw(frame, area, app, look);
}

fn too_small(frame: &mut Frame, area: Rect, look: &Look) {
    let text = format!(
        "Terminal too small ({}x{}).\nEnlarge it to at least {MIN_WIDTH}x{MIN_HEIGHT}.\nTraining goes on; q stops.",
        area.width, area.height
    );
    let p = Paragraph::new(text).style(look.theme.fg(look.theme.warning)).wrap(Wrap { trim: true });
    frame.render_widget(p, area);
}

fn footer(frame: &mut Frame, area: Rect, app: &App, look: &Look, compact: bool) {
    let mut keys = crate::dashboard::keys::footer(
        app.run.state.is_over(),
        compact,
        app.curves.data.counts_classes(),
        |c| app.run.info.as_ref().is_none_or(|i| i.can(c)),
    );
    if app.viewer.returns {
        keys.insert(0, ("Esc", "back to the sweep"));
    }
    let theme = look.theme;
    let mut spans = Vec::new();
    // Keys that do not fit are left out, never cut; the help key (last) always shows.
    let item_width = |(k, what): &(&str, &str)| k.chars().count() + what.chars().count() + 5;
    let mut room = (area.width as usize).saturating_sub(keys.last().map_or(0, item_width));
    for (i, key) in keys.iter().enumerate() {
        let last = i + 1 == keys.len();
        if !last {
            if item_width(key) > room {
                continue;
            }
            room -= item_width(key);
        }
        let (k, what) = key;
        spans.push(Span::styled(format!(" {k} "), theme.highlight()));
        spans.push(Span::styled(format!(" {what}  "), theme.fg(theme.dim)));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).alignment(Alignment::Left), area);
}

/// `3723.4` seconds → `1:02:03`.
pub fn hms(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Bytes in GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}
