//! Drawing the sweep board: a pure function of the [`Board`] and the look. The table of trials
//! (each with a thumbnail of its curve, on one scale for all), the best trial's curve with the
//! selected trial's beside it, the seed groups, and the keys.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use dpt_core::sweep::TrialState;

use super::bindings;
use super::board::{Board, Column, Overlay, SweepData, TrialRow};
use crate::dashboard::view::plot::{Plot, Series};
use crate::dashboard::view::{hms, Look};
use crate::record::curves::y_range;

/// Cells of a trial's thumbnail curve.
const THUMB: usize = 12;

pub fn draw(frame: &mut Frame, board: &Board, look: &Look) {
    let area = frame.area();
    let data = board.data();
    let groups = board.groups();
    // The table as tall as its rows (a border, the header, a row per trial), the curves below
    // taking the rest; on a short terminal, the table alone.
    let table_height = (data.trials.len() as u16 + 3).clamp(5, area.height.saturating_sub(13).max(5));
    let lower = if area.height >= 24 { area.height.saturating_sub(table_height + 3) } else { 0 };
    let [title_area, table_area, lower_area, note_area, footer_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(4),
        Constraint::Length(lower),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(title(board, look)), title_area);
    table(frame, table_area, board, look);
    if lower > 0 {
        let group_width = if groups.is_empty() { 0 } else { (area.width / 3).max(30) };
        let [curve_area, group_area] =
            Layout::horizontal([Constraint::Min(30), Constraint::Length(group_width)]).areas(lower_area);
        curve(frame, curve_area, board, look);
        if !groups.is_empty() {
            let lines: Vec<Line> = groups
                .iter()
                .map(|g| {
                    let said = match g.stats {
                        Some((m, s)) => {
                            let pm = if look.ascii { "+-" } else { "±" };
                            format!("{m:.4} {pm} {s:.4} ({} of {})", g.finished, g.of)
                        }
                        None => format!("- (0 of {} finished)", g.of),
                    };
                    Line::from(vec![
                        Span::styled(format!("{}: ", g.name), look.theme.fg(look.theme.text)),
                        Span::styled(said, look.theme.fg(look.theme.accent)),
                    ])
                })
                .collect();
            let block = look.panel(format!("{} over the seeds", data.metric.label()));
            frame.render_widget(Paragraph::new(lines).block(block), group_area);
        }
    }
    let problem = || data.problem.as_ref().map(|p| format!("the sweep ended: {p}"));
    let reason = || {
        board
            .selected()
            .and_then(|t| t.reason.as_ref().map(|r| format!("{} {}: {r}", t.dir, t.state.label())))
    };
    let note = board.note.clone().or_else(problem).or_else(reason);
    if let Some(note) = note {
        frame.render_widget(Paragraph::new(note).style(look.theme.fg(look.theme.warning)), note_area);
    }
    footer(frame, footer_area, look, board.is_read_only());
    if let Some(overlay) = &board.overlay {
        draw_overlay(frame, area, overlay, board, look);
    }
}

/// `sweep FOLDER · running · 2 finished, 1 running of 4 · sorted by best ↓`.
fn title<'a>(board: &Board, look: &Look) -> Line<'a> {
    let data = board.data();
    let sep = format!(" {} ", look.sep());
    let states: Vec<TrialState> = data.trials.iter().map(|t| t.state).collect();
    let (state, colour) = if data.running {
        ("running", look.theme.running)
    } else if data.trials.iter().all(|t| t.state.is_settled()) {
        ("done", look.theme.finished)
    } else {
        ("stopped", look.theme.paused)
    };
    let mut spans = vec![
        Span::styled(format!("sweep {}", data.folder), look.theme.title()),
        Span::raw(sep.clone()),
        Span::styled(state, look.theme.fg(colour).add_modifier(Modifier::BOLD)),
        Span::raw(sep.clone()),
        Span::styled(TrialState::count(&states), look.theme.fg(look.theme.text)),
    ];
    if let (Some(column), descending) = board.sort() {
        let arrow = match (look.ascii, descending) {
            (true, true) => "v",
            (true, false) => "^",
            (false, true) => "↓",
            (false, false) => "↑",
        };
        spans.push(Span::raw(sep));
        spans.push(Span::styled(
            format!("sorted by {} {arrow}", column.name(data)),
            look.theme.fg(look.theme.dim),
        ));
    }
    Line::from(spans)
}

fn state_colour(state: TrialState, look: &Look) -> ratatui::style::Color {
    let t = look.theme;
    match state {
        TrialState::Running => t.running,
        TrialState::Finished => t.finished,
        TrialState::Failed => t.error,
        TrialState::Pruned | TrialState::Stopped | TrialState::Interrupted => t.paused,
        TrialState::Pending => t.dim,
    }
}

fn num(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"))
}

/// The table's columns' widths, the spacing between them and the thumbnails' cells (0: none).
struct Widths {
    columns: Vec<u16>,
    spacing: u16,
    thumb: u16,
}

impl Widths {
    /// The widths for a table `inner` cells wide: on a narrow terminal the columns close up,
    /// then the thumbnails go, so that every trial's name and figures stay whole.
    fn of(data: &SweepData, inner: u16) -> Widths {
        let longest = data.trials.iter().map(|t| t.dir.len()).max().unwrap_or(5).max(5);
        let mut columns: Vec<u16> = vec![longest as u16];
        columns.extend(data.axes.iter().enumerate().map(|(a, name)| {
            let values = data.trials.iter().filter_map(|t| t.values.get(a));
            values.map(|v| v.chars().count()).max().unwrap_or(1).max(name.chars().count()) as u16
        }));
        columns.extend([11, 9, 7, 7, 8]);
        // The thumbnails' cells: up to THUMB, at least 4, in what the other columns leave.
        let room =
            |spacing: u16| inner.saturating_sub(columns.iter().sum::<u16>() + spacing * columns.len() as u16);
        let (spacing, thumb) = [2, 1]
            .into_iter()
            .map(|spacing| (spacing, room(spacing).min(THUMB as u16)))
            .find(|&(_, thumb)| thumb >= 4)
            .unwrap_or((1, 0));
        if thumb > 0 {
            columns.push(thumb);
        }
        Widths { columns, spacing, thumb }
    }
}

/// The header: each column's name, the one the rows are sorted by underlined.
fn header(board: &Board, look: &Look, curve: bool) -> Row<'static> {
    let (data, theme) = (board.data(), look.theme);
    let (sorted, _) = board.sort();
    let mut cells: Vec<Cell> = Column::all(data)
        .into_iter()
        .map(|c| {
            let style = theme.title();
            let style = if Some(c) == sorted { style.add_modifier(Modifier::UNDERLINED) } else { style };
            Cell::from(c.name(data)).style(style)
        })
        .collect();
    if curve {
        cells.push(Cell::from("curve").style(theme.title()));
    }
    Row::new(cells)
}

/// What every trial's row is drawn with.
struct RowLook<'a> {
    look: &'a Look<'a>,
    best: Option<&'a str>,
    selected: Option<&'a str>,
    /// One scale for every thumbnail, so that their heights compare.
    scale: Option<(f64, f64)>,
    thumb: u16,
}

fn trial_row(t: &TrialRow, r: &RowLook) -> Row<'static> {
    let theme = r.look.theme;
    let mut cells = vec![Cell::from(t.dir.clone())];
    cells.extend(t.values.iter().map(|v| Cell::from(v.clone())));
    // Started, its dashboard not served yet (loading its data, say).
    let label = if t.state == TrialState::Running && !t.live { "starting" } else { t.state.label() };
    cells.push(Cell::from(label).style(theme.fg(state_colour(t.state, r.look))));
    cells.push(Cell::from(if t.state == TrialState::Pending {
        "-".to_owned()
    } else {
        format!("{:.1}/{}", t.epoch, t.epochs)
    }));
    cells.push(Cell::from(num(t.latest)));
    let best_style = if r.best == Some(t.dir.as_str()) {
        theme.fg(theme.accent).add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    cells.push(Cell::from(num(t.best)).style(best_style));
    cells.push(Cell::from(t.eta.filter(|_| t.state == TrialState::Running).map_or("-".to_owned(), hms)));
    if r.thumb > 0 {
        let thumb = thumbnail(t, r.scale, usize::from(r.thumb), r.look.ascii);
        cells.push(Cell::from(thumb).style(theme.fg(theme.test_acc)));
    }
    let row = Row::new(cells);
    if r.selected == Some(t.dir.as_str()) {
        row.style(theme.highlight())
    } else {
        row
    }
}

fn table(frame: &mut Frame, area: Rect, board: &Board, look: &Look) {
    let data = board.data();
    let widths = Widths::of(data, area.width.saturating_sub(2));
    let curves: Vec<&[(f64, f64)]> = data.trials.iter().map(|t| t.curve.as_slice()).collect();
    let r = RowLook {
        look,
        best: board.best().map(|t| t.dir.as_str()),
        selected: board.selected().map(|t| t.dir.as_str()),
        scale: y_range(&curves, (f64::NEG_INFINITY, f64::INFINITY), false),
        thumb: widths.thumb,
    };
    let order = board.rows();
    let at = order.iter().position(|&i| r.selected == Some(data.trials[i].dir.as_str()));
    let rows: Vec<Row> = order.into_iter().map(|i| trial_row(&data.trials[i], &r)).collect();
    let constraints: Vec<Constraint> = widths.columns.into_iter().map(Constraint::Length).collect();
    let block = look.panel(format!("trials {} {}", look.sep(), data.metric.label()));
    // The selected row stays in view: the table scrolls to it.
    let mut state = TableState::default().with_selected(at);
    let table = Table::new(rows, constraints).header(header(board, look, widths.thumb > 0));
    frame.render_stateful_widget(table.block(block).column_spacing(widths.spacing), area, &mut state);
}

/// A trial's curve in `cells` cells, as bars of eight heights on the sweep's `scale`.
fn thumbnail(t: &TrialRow, scale: Option<(f64, f64)>, cells: usize, ascii: bool) -> String {
    let (Some((lo, hi)), false) = (scale, t.curve.is_empty()) else { return String::new() };
    let levels: &[char] = if ascii {
        &['_', '.', '-', '-', '=', '=', '#', '#']
    } else {
        &['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█']
    };
    let n = t.curve.len();
    // The latest `cells` evaluations, or every one when fewer.
    t.curve[n.saturating_sub(cells)..]
        .iter()
        .map(|&(_, y)| {
            if !y.is_finite() {
                return ' ';
            }
            let f = ((y - lo) / (hi - lo).max(1e-12)).clamp(0.0, 1.0);
            levels[((f * (levels.len() - 1) as f64).round() as usize).min(levels.len() - 1)]
        })
        .collect()
}

/// The best trial's curve, and the selected trial's when it is another.
fn curve(frame: &mut Frame, area: Rect, board: &Board, look: &Look) {
    let data = board.data();
    let theme = look.theme;
    let Some(best) = board.best() else {
        let block = look.panel("best trial");
        frame.render_widget(Paragraph::new("no trial has evaluated yet").block(block), area);
        return;
    };
    let name = |t: &TrialRow| {
        let values: Vec<String> = data.axes.iter().zip(&t.values).map(|(a, v)| format!("{a}={v}")).collect();
        format!("{} ({})", t.dir, values.join(" "))
    };
    let title = format!("best: {} {} {}", name(best), data.metric.label(), num(best.best));
    let block = look.panel(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let selected = board.selected().filter(|s| s.dir != best.dir && !s.curve.is_empty());
    let [legend_area, plot_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(inner);
    let mark = if look.ascii { "#" } else { "■" };
    let mut legend = vec![Span::styled(format!("{mark} {}", best.dir), theme.fg(theme.test_acc))];
    if let Some(s) = selected {
        legend.push(Span::styled(format!("   {mark} {} (selected)", name(s)), theme.fg(theme.train_loss)));
    }
    frame.render_widget(Paragraph::new(Line::from(legend)), legend_area);
    let mut series = vec![Series { points: &best.curve, color: theme.test_acc }];
    if let Some(s) = selected {
        series.push(Series { points: &s.curve, color: theme.train_loss });
    }
    let x_hi =
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(best.epochs as f64, f64::max).max(1.0);
    let points: Vec<&[(f64, f64)]> = series.iter().map(|s| s.points).collect();
    let Some(y) = y_range(&points, (0.0, x_hi), false) else { return };
    let plot = Plot {
        series,
        x: (0.0, x_hi),
        x_scale: 1.0,
        y,
        log_y: false,
        marks: Vec::new(),
        ascii: look.ascii,
        axis_style: theme.fg(theme.dim),
    };
    frame.render_widget(plot, plot_area);
}

fn footer(frame: &mut Frame, area: Rect, look: &Look, read_only: bool) {
    let mut spans = Vec::new();
    let mut room = area.width as usize;
    for (k, what) in bindings::footer(read_only, look.ascii) {
        let width = k.chars().count() + what.chars().count() + 5;
        if width > room {
            break;
        }
        room -= width;
        spans.push(Span::styled(format!(" {k} "), look.theme.highlight()));
        spans.push(Span::styled(format!(" {what}  "), look.theme.fg(look.theme.dim)));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// A box of `lines` in the middle of `area`.
fn boxed(frame: &mut Frame, area: Rect, title: &str, lines: Vec<Line>, look: &Look) {
    let width = lines.iter().map(Line::width).max().unwrap_or(0).max(title.len() + 4) as u16 + 4;
    let height = lines.len() as u16 + 2;
    let r = Rect {
        x: area.x + area.width.saturating_sub(width) / 2,
        y: area.y + area.height.saturating_sub(height) / 2,
        width: width.min(area.width),
        height: height.min(area.height),
    };
    frame.render_widget(Clear, r);
    frame.render_widget(Paragraph::new(lines).block(look.panel(title)).wrap(Wrap { trim: false }), r);
}

fn draw_overlay(frame: &mut Frame, area: Rect, overlay: &Overlay, board: &Board, look: &Look) {
    use super::board::Action;
    let theme = look.theme;
    match overlay {
        Overlay::Confirm(action) => {
            let question = match action {
                Action::StopTrial(dir) => {
                    format!("Stop {dir}? It checkpoints and ends; its place goes to the next trial.")
                }
                Action::StopSweep => {
                    "Stop the sweep? Its running trials checkpoint; the same command continues it.".to_owned()
                }
                other => format!("{other:?}?"),
            };
            let lines = vec![
                Line::from(question),
                Line::from(Span::styled("y stops, any other key cancels", theme.fg(theme.dim))),
            ];
            boxed(frame, area, "stop", lines, look);
        }
        Overlay::Lr { dir, input, error } => {
            let mut lines = vec![Line::from(vec![
                Span::raw(format!("{dir}'s new lr: ")),
                Span::styled(format!("{input}_"), theme.highlight()),
            ])];
            if let Some(e) = error {
                lines.push(Line::from(Span::styled(e.clone(), theme.fg(theme.error))));
            }
            lines.push(Line::from(Span::styled("Enter applies, Esc cancels", theme.fg(theme.dim))));
            boxed(frame, area, "learning rate", lines, look);
        }
        Overlay::Help => {
            let rows = bindings::help(look.ascii);
            let lines: Vec<Line> = rows
                .iter()
                .map(|(k, what)| {
                    Line::from(vec![
                        Span::styled(format!("{k:<10}"), theme.fg(theme.accent)),
                        Span::raw(*what),
                    ])
                })
                .collect();
            boxed(frame, area, &format!("keys {} {}", look.sep(), board.data().folder), lines, look);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::board::tests::sweep;
    use super::*;
    use crate::dashboard::theme::Theme;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn screen(board: &Board, width: u16, height: u16, ascii: bool) -> String {
        let theme = Theme::load("monochrome").expect("a built-in theme");
        let look = Look { theme: &theme, ascii };
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
        terminal.draw(|f| draw(f, board, &look)).expect("drawn");
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_owned())
                    .collect::<String>()
                    .trim_end()
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_board_shows_every_trial_the_best_curve_and_the_seed_groups() {
        let mut board = Board::default();
        board.update(sweep());
        insta::assert_snapshot!("sweep_board_120x30", screen(&board, 120, 30, false));
        board.on_key(crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Char('?'),
            crossterm::event::KeyModifiers::NONE,
        ));
        insta::assert_snapshot!("sweep_board_help_ascii_100x24", screen(&board, 100, 24, true));
    }

    #[test]
    fn on_80_columns_the_names_and_figures_stay_whole() {
        let mut board = Board::default();
        board.update(sweep());
        let s = screen(&board, 80, 24, false);
        assert!(s.contains("│trial-002 0.05 1    running"), "the columns close up:\n{s}");
        assert!(s.contains("0:00:12"), "{s}");
        let s = screen(&board, 70, 24, false);
        assert!(
            s.contains("trial-002") && s.contains("0:00:12") && !s.contains("curve"),
            "the thumbnails go:\n{s}"
        );
    }

    #[test]
    fn the_table_scrolls_to_the_selected_trial() {
        let mut data = sweep();
        let template = data.trials[3].clone();
        data.trials = (0..40)
            .map(|i| TrialRow {
                dir: format!("trial-{i:03}"),
                values: vec![format!("{i}"), "1".into()],
                ..template.clone()
            })
            .collect();
        let mut board = Board::default();
        board.update(data);
        for _ in 0..30 {
            board.on_key(crossterm::event::KeyEvent::new(
                crossterm::event::KeyCode::Down,
                crossterm::event::KeyModifiers::NONE,
            ));
        }
        let s = screen(&board, 100, 24, false);
        assert!(s.contains("trial-030 "), "the selected row is shown:\n{s}");
        assert!(!s.contains("trial-000 "), "{s}");
    }
}
