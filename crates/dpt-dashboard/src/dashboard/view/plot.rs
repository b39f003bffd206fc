//! A line plot drawn straight into the buffer: braille dots (2×4 per cell) or plain ASCII, axis
//! labels, and vertical marks. Written here because the plot needs marks and an ASCII mode.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::Widget;

/// One line of the plot.
pub struct Series<'a> {
    pub points: &'a [(f64, f64)],
    pub color: Color,
}

/// The plot: series over `x` and `y` ranges (y already in log10 when `log_y`).
pub struct Plot<'a> {
    pub series: Vec<Series<'a>>,
    pub x: (f64, f64),
    /// What one unit of x is labelled as (the steps in an evaluation period for a run
    /// measured in steps; 1 for epochs).
    pub x_scale: f64,
    pub y: (f64, f64),
    pub log_y: bool,
    pub marks: Vec<(f64, Color)>,
    pub ascii: bool,
    pub axis_style: Style,
}

/// Width of the y-axis labels.
const LABEL_WIDTH: u16 = 8;

/// A label for `v` on an axis spanning `span`: enough decimals to tell the ticks apart, none
/// for whole numbers on a wide axis; scientific notation for very large or small values.
pub fn tick_label(v: f64, span: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e6).contains(&a) {
        return format!("{v:.2e}");
    }
    let decimals = (2.0 - span.abs().max(1e-12).log10().floor()).clamp(0.0, 6.0) as usize;
    if v.fract() == 0.0 && span >= 2.0 {
        return format!("{v:.0}");
    }
    format!("{v:.decimals$}")
}

fn braille_bit(sx: usize, sy: usize) -> u8 {
    const BITS: [[u8; 4]; 2] = [[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]];
    BITS[sx][sy]
}

impl Plot<'_> {
    fn y_value(&self, y: f64) -> Option<f64> {
        if self.log_y {
            (y > 0.0).then(|| y.log10())
        } else {
            y.is_finite().then_some(y)
        }
    }
}

impl Widget for Plot<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width <= LABEL_WIDTH + 4 || area.height < 4 {
            return;
        }
        let plot = Rect {
            x: area.x + LABEL_WIDTH,
            y: area.y,
            width: area.width - LABEL_WIDTH,
            height: area.height - 2,
        };
        let (w, h) = (plot.width as usize, plot.height as usize);
        let (sub_x, sub_y) = if self.ascii { (1, 1) } else { (2, 4) };
        let (gw, gh) = (w * sub_x, h * sub_y);
        let (x0, x1) = (self.x.0, self.x.1.max(self.x.0 + 1e-9));
        let (y0, y1) = (self.y.0, self.y.1.max(self.y.0 + 1e-12));
        let to_grid = |x: f64, y: f64| -> (f64, f64) {
            ((x - x0) / (x1 - x0) * (gw - 1) as f64, (y1 - y) / (y1 - y0) * (gh - 1) as f64)
        };

        // Axes and labels.
        let (vline, hline, corner) = if self.ascii { ("|", "-", "+") } else { ("│", "─", "└") };
        for row in 0..plot.height {
            buf.set_string(plot.x - 1, plot.y + row, vline, self.axis_style);
        }
        buf.set_string(plot.x - 1, plot.y + plot.height, corner, self.axis_style);
        for col in 0..plot.width {
            buf.set_string(plot.x + col, plot.y + plot.height, hline, self.axis_style);
        }
        let y_label = |v: f64| {
            if self.log_y {
                let real = 10f64.powf(v);
                tick_label(real, real * (10f64.powf((y1 - y0) / 2.0) - 1.0))
            } else {
                tick_label(v, y1 - y0)
            }
        };
        for (row, v) in [(0, y1), (plot.height / 2, (y0 + y1) / 2.0), (plot.height - 1, y0)] {
            let label = y_label(v);
            let label: String = label.chars().take(LABEL_WIDTH as usize - 1).collect();
            let x = area.x + LABEL_WIDTH - 1 - label.len() as u16;
            buf.set_string(x, plot.y + row, label, self.axis_style);
        }
        let label_row = plot.y + plot.height + 1;
        let x_label = |v: f64| {
            let (v, span) = (v * self.x_scale, (x1 - x0) * self.x_scale);
            // Steps are whole numbers.
            tick_label(if self.x_scale > 1.0 { v.round() } else { v }, span)
        };
        let (left, mid, right) = (x_label(x0), x_label((x0 + x1) / 2.0), x_label(x1));
        buf.set_string(plot.x, label_row, &left, self.axis_style);
        let mid_x = plot.x + plot.width / 2 - (mid.len() as u16) / 2;
        if mid_x > plot.x + left.len() as u16 + 1 {
            buf.set_string(mid_x, label_row, &mid, self.axis_style);
        }
        let right_x = (plot.x + plot.width).saturating_sub(right.len() as u16);
        if right_x > mid_x + mid.len() as u16 {
            buf.set_string(right_x, label_row, &right, self.axis_style);
        }

        // Vertical marks first, so the curves draw over them.
        let mark_char = if self.ascii { ":" } else { "┊" };
        for (mx, color) in &self.marks {
            if *mx < x0 || *mx > x1 {
                continue;
            }
            let col = ((mx - x0) / (x1 - x0) * (w - 1) as f64).round() as u16;
            for row in 0..plot.height {
                buf.set_string(plot.x + col, plot.y + row, mark_char, Style::default().fg(*color));
            }
        }

        // Rasterize every series onto the sub-cell grid, joining points with straight lines.
        let mut dots = vec![0u8; w * h];
        let mut colors: Vec<Option<Color>> = vec![None; w * h];
        for s in &self.series {
            let mut prev: Option<(f64, f64)> = None;
            for &(x, y) in s.points {
                let Some(yv) = self.y_value(y) else {
                    prev = None;
                    continue;
                };
                if x < x0 - 1e-9 || x > x1 + 1e-9 {
                    prev = None;
                    continue;
                }
                let p = to_grid(x, yv.clamp(y0, y1));
                let from = prev.unwrap_or(p);
                let steps = ((p.0 - from.0).abs().max((p.1 - from.1).abs()).ceil() as usize).max(1);
                for i in 0..=steps {
                    let t = i as f64 / steps as f64;
                    let gx = (from.0 + (p.0 - from.0) * t).round() as usize;
                    let gy = (from.1 + (p.1 - from.1) * t).round() as usize;
                    if gx >= gw || gy >= gh {
                        continue;
                    }
                    let cell = (gy / sub_y) * w + gx / sub_x;
                    dots[cell] |= if self.ascii { 1 } else { braille_bit(gx % sub_x, gy % sub_y) };
                    colors[cell] = Some(s.color);
                }
                prev = Some(p);
            }
        }
        for (cell, bits) in dots.iter().enumerate() {
            if *bits == 0 {
                continue;
            }
            let symbol = if self.ascii {
                "*".to_owned()
            } else {
                char::from_u32(0x2800 + u32::from(*bits)).map_or_else(|| "*".to_owned(), |c| c.to_string())
            };
            let (col, row) = ((cell % w) as u16, (cell / w) as u16);
            let style = Style::default().fg(colors[cell].unwrap_or(Color::Reset));
            buf.set_string(plot.x + col, plot.y + row, symbol, style);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tick_label;

    #[test]
    fn labels_carry_the_needed_precision() {
        assert_eq!(tick_label(10.0, 10.0), "10");
        assert_eq!(tick_label(5.0, 10.0), "5");
        assert_eq!(tick_label(2.5, 5.0), "2.50");
        assert_eq!(tick_label(2.3012, 0.01), "2.3012");
        assert_eq!(tick_label(0.2, 0.2), "0.200");
        assert_eq!(tick_label(1.5e-6, 1e-6), "1.50e-6");
    }
}
