//! `dpt-tui show RUN --png FILE`: the run's curves as a picture for a report. Two panels (loss;
//! accuracy) against epochs, drawn into an RGB buffer with a small built-in pixel font and
//! encoded with the `png` crate.

use std::io::BufWriter;
use std::path::Path;

use crate::dashboard::curves::{y_range, Curves};
use crate::engine::Event;

const W: usize = 960;
const H: usize = 640;
type Rgb = [u8; 3];
const WHITE: Rgb = [255, 255, 255];
const AXIS: Rgb = [60, 60, 60];
const GRID: Rgb = [225, 225, 225];
const TRAIN_LOSS: Rgb = [214, 120, 0];
const TEST_LOSS: Rgb = [200, 40, 40];
const TRAIN_ACC: Rgb = [20, 140, 40];
const TEST_ACC: Rgb = [150, 40, 170];
const MARK: Rgb = [70, 110, 220];

/// 3×5 glyphs, rows top to bottom, `#` lit.
fn glyph(c: char) -> [&'static str; 5] {
    match c {
        '0' => ["###", "#.#", "#.#", "#.#", "###"],
        '1' => [".#.", "##.", ".#.", ".#.", "###"],
        '2' => ["###", "..#", "###", "#..", "###"],
        '3' => ["###", "..#", "###", "..#", "###"],
        '4' => ["#.#", "#.#", "###", "..#", "..#"],
        '5' => ["###", "#..", "###", "..#", "###"],
        '6' => ["###", "#..", "###", "#.#", "###"],
        '7' => ["###", "..#", "..#", "..#", "..#"],
        '8' => ["###", "#.#", "###", "#.#", "###"],
        '9' => ["###", "#.#", "###", "..#", "###"],
        '.' => ["...", "...", "...", "...", ".#."],
        '-' => ["...", "...", "###", "...", "..."],
        ':' => ["...", ".#.", "...", ".#.", "..."],
        'a' => ["...", "##.", "..#", "###", "###"],
        'c' => ["...", "###", "#..", "#..", "###"],
        'e' => ["###", "#..", "###", "#..", "###"],
        'h' => ["#..", "#..", "###", "#.#", "#.#"],
        'i' => [".#.", "...", ".#.", ".#.", ".#."],
        'l' => [".#.", ".#.", ".#.", ".#.", ".##"],
        'n' => ["...", "##.", "#.#", "#.#", "#.#"],
        'o' => ["...", "###", "#.#", "#.#", "###"],
        'p' => ["###", "#.#", "###", "#..", "#.."],
        'r' => ["...", "###", "#..", "#..", "#.."],
        's' => ["###", "#..", "###", "..#", "###"],
        't' => [".#.", "###", ".#.", ".#.", ".##"],
        'u' => ["...", "#.#", "#.#", "#.#", "###"],
        'y' => ["#.#", "#.#", "###", "..#", "###"],
        _ => ["...", "...", "...", "...", "..."],
    }
}

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            let i = (y as usize * W + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), c: Rgb, thick: i64) {
        let steps = ((x1 - x0).abs().max((y1 - y0).abs()).ceil() as i64).max(1);
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            let (x, y) = ((x0 + (x1 - x0) * t).round() as i64, (y0 + (y1 - y0) * t).round() as i64);
            for d in 0..thick {
                self.set(x, y + d, c);
                self.set(x + d, y, c);
            }
        }
    }

    /// Text at (x, y) (top left), glyphs scaled by 2.
    fn text(&mut self, x: i64, y: i64, s: &str, c: Rgb) {
        for (k, ch) in s.chars().enumerate() {
            for (row, bits) in glyph(ch).iter().enumerate() {
                for (col, b) in bits.chars().enumerate() {
                    if b == '#' {
                        for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                            self.set(x + k as i64 * 8 + col as i64 * 2 + dx, y + row as i64 * 2 + dy, c);
                        }
                    }
                }
            }
        }
    }
}

fn label(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A named, coloured series.
type Line<'a> = (&'a str, &'a [(f64, f64)], Rgb);

/// One panel: `series` against epochs in the rectangle (x, y, w, h).
fn panel(cv: &mut Canvas, rect: (f64, f64, f64, f64), title: &str, series: &[Line], c: &Curves, epochs: f64) {
    let (x, y, w, h) = rect;
    let slices: Vec<&[(f64, f64)]> = series.iter().map(|s| s.1).collect();
    let xr = (0.0, epochs.max(c.x).max(1.0));
    let Some((y0, y1)) = y_range(&slices, xr, false) else { return };
    let px = |ex: f64| x + (ex - xr.0) / (xr.1 - xr.0) * w;
    let py = |v: f64| y + h - (v - y0) / (y1 - y0).max(1e-12) * h;
    for i in 0..=4 {
        let v = y0 + (y1 - y0) * i as f64 / 4.0;
        cv.line((x, py(v)), (x + w, py(v)), GRID, 1);
        cv.text(x as i64 - 52, py(v) as i64 - 5, &label(v), AXIS);
    }
    let ticks = (xr.1.ceil() as usize).clamp(1, 10);
    for i in 0..=ticks {
        let e = xr.1 * i as f64 / ticks as f64;
        cv.line((px(e), y + h), (px(e), y + h + 5.0), AXIS, 1);
        cv.text(px(e) as i64 - 6, (y + h + 10.0) as i64, &label(e), AXIS);
    }
    for (mx, _) in &c.marks {
        cv.line((px(*mx), y), (px(*mx), y + h), MARK, 1);
    }
    cv.line((x, y + h), (x + w, y + h), AXIS, 2);
    cv.line((x, y), (x, y + h), AXIS, 2);
    cv.text(x as i64, y as i64 - 22, title, AXIS);
    let mut lx = x + w - 150.0 * series.len() as f64;
    for (name, points, color) in series {
        cv.line((lx, y - 16.0), (lx + 20.0, y - 16.0), *color, 3);
        cv.text(lx as i64 + 26, y as i64 - 21, name, AXIS);
        lx += 150.0;
        let mut prev: Option<(f64, f64)> = None;
        for &(ex, v) in points.iter().filter(|(_, v)| v.is_finite()) {
            let p = (px(ex), py(v));
            if let Some(q) = prev {
                cv.line(q, p, *color, 2);
            } else {
                cv.line(p, p, *color, 3);
            }
            prev = Some(p);
        }
    }
    cv.text((x + w / 2.0) as i64 - 20, (y + h + 28.0) as i64, "epoch", AXIS);
}

/// Draws the curves of `history` (a run's events) into a PNG at `path`, written atomically.
pub fn write_png(history: &[Event], path: &Path) -> Result<(), String> {
    let mut curves = Curves::default();
    let mut epochs = 1.0f64;
    for e in history {
        match e {
            Event::Started(i) => epochs = epochs.max(i.epochs as f64),
            Event::Step(s) => curves.on_step(s),
            Event::Epoch(s) => curves.on_epoch(s),
            Event::LrChanged { to, .. } => {
                curves.mark(crate::dashboard::curves::MarkKind::LrChange);
                curves.on_lr(*to);
            }
            Event::Paused { .. } => curves.mark(crate::dashboard::curves::MarkKind::Pause),
            _ => {}
        }
    }
    if curves.train_loss.is_empty() && curves.test_acc.is_empty() {
        return Err("the run has no recorded steps or epochs yet; nothing to plot".into());
    }
    let mut cv = Canvas { px: WHITE.repeat(W * H) };
    let half = (H as f64 - 120.0) / 2.0;
    panel(
        &mut cv,
        (80.0, 40.0, W as f64 - 120.0, half - 40.0),
        "loss",
        &[("train loss", &curves.train_loss, TRAIN_LOSS), ("test loss", &curves.test_loss, TEST_LOSS)],
        &curves,
        epochs,
    );
    panel(
        &mut cv,
        (80.0, 80.0 + half, W as f64 - 120.0, half - 40.0),
        "accuracy",
        &[("train acc", &curves.train_acc, TRAIN_ACC), ("test acc", &curves.test_acc, TEST_ACC)],
        &curves,
        epochs,
    );
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let result = (|| {
        let file =
            std::fs::File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let mut enc = png::Encoder::new(BufWriter::new(file), W as u32, H as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(&cv.px).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
