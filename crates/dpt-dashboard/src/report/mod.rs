//! `dpt-tui show RUN --png FILE` / `--svg FILE`: the run's curves as a picture for a report.
//!
//! Drawn once as SVG with `plotters` (loss and accuracy against epochs, lr-change and pause
//! marks, the run's name, model, devices and final test accuracy in the title); the PNG is that
//! SVG rendered by `resvg` with DejaVu Sans, which is embedded in the binary, so a picture looks
//! the same on every machine and needs no system font.

/// A panel's chart over `$area` captioned `$caption`, for the points of `$slices` up to `$x_max`
/// (in `$curves`' unit of x), its mesh drawn: `Some((chart, (y0, y1), x_end))`, the y axis on
/// multiples of its tick step; `None` when no point is finite. Returns from the calling
/// function (`Result<_, String>`) on a drawing error. A macro, as the chart's coordinate type
/// cannot be named outside `plotters`.
macro_rules! panel_axes {
    ($area:expr, $caption:expr, $curves:expr, $slices:expr, $x_max:expr) => {{
        use plotters::prelude::*;
        match crate::record::curves::y_range($slices, (0.0, $x_max), false) {
            None => None,
            Some((lo, hi)) => {
                // Ticks on whole epochs, or on round step counts for a run measured in steps.
                let (unit, per_x) = $curves.x_unit();
                let x_step = crate::report::chart::nice_step($x_max * per_x, 10).max(1.0) / per_x;
                let y_step = crate::report::chart::nice_step(hi - lo, 6);
                // Ticks fall on multiples of the step: the axis starts and ends on one.
                let (y0, y1) = ((lo / y_step).floor() * y_step, (hi / y_step).ceil() * y_step);
                // The last whole epoch gets its tick too.
                let x_end = $x_max + x_step * 1e-6;
                let mut chart = ChartBuilder::on($area)
                    .caption($caption, ("sans-serif", 18))
                    .margin(12)
                    .x_label_area_size(40)
                    .y_label_area_size(60)
                    .build_cartesian_2d((0.0..x_end).step(x_step), (y0..y1 + y_step * 1e-6).step(y_step))
                    .map_err(|e| e.to_string())?;
                let decimals = (-y_step.log10().floor()).max(0.0) as usize;
                chart
                    .configure_mesh()
                    .x_desc(unit)
                    .x_label_formatter(&|x| format!("{:.0}", x * per_x))
                    .y_label_formatter(&|y| format!("{y:.decimals$}"))
                    .label_style(("sans-serif", 14))
                    .axis_desc_style(("sans-serif", 15))
                    .light_line_style(WHITE)
                    .bold_line_style(RGBColor(225, 225, 225))
                    .draw()
                    .map_err(|e| e.to_string())?;
                Some((chart, (y0, y1), x_end))
            }
        }
    }};
}

mod chart;
pub mod sweep;

use std::path::Path;

use thiserror::Error;

use crate::atomic;
use crate::record::curves::Curves;
use crate::record::Record;

/// The picture's size in pixels.
pub const SIZE: (u32, u32) = (960, 640);

/// DejaVu Sans 2.37 (assets/fonts/dejavu: licence and provenance).
static FONT: &[u8] = include_bytes!("../../../../assets/fonts/dejavu/DejaVuSans.ttf");

/// The picture's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

/// Why no picture was written.
#[derive(Debug, Error)]
pub enum ReportError {
    #[error("the run has no recorded steps or epochs yet; nothing to plot")]
    Empty,
    #[error("cannot draw the chart: {0}")]
    Draw(String),
    #[error("cannot render the chart as PNG: {0}")]
    Render(String),
    #[error("cannot write {path}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        cause: std::io::Error,
    },
}

/// The run's curves as an SVG document.
pub fn svg(records: &[Record], run_name: &str) -> Result<String, ReportError> {
    let curves = Curves::of(records);
    if curves.is_empty() {
        return Err(ReportError::Empty);
    }
    let title = chart::title(records, run_name);
    chart::draw(&curves, &title).map_err(ReportError::Draw)
}

/// An SVG document rendered to PNG bytes with the embedded font.
pub fn png(svg: &str) -> Result<Vec<u8>, ReportError> {
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_font_data(FONT.to_vec());
    opt.fontdb_mut().set_sans_serif_family("DejaVu Sans");
    opt.font_family = "DejaVu Sans".into();
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| ReportError::Render(e.to_string()))?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(SIZE.0, SIZE.1)
        .ok_or_else(|| ReportError::Render("no pixmap".into()))?;
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().map_err(|e| ReportError::Render(e.to_string()))
}

/// Draws the curves of the run in `run_dir` (its `records`) into `path`, written atomically.
pub fn write(records: &[Record], run_dir: &Path, path: &Path, format: Format) -> Result<(), ReportError> {
    let name = run_dir
        .file_name()
        .map_or_else(|| run_dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    save(svg(records, &name)?, path, format)
}

/// `svg` written atomically into `path` as `format`.
fn save(svg: String, path: &Path, format: Format) -> Result<(), ReportError> {
    let bytes = match format {
        Format::Svg => svg.into_bytes(),
        Format::Png => png(&svg)?,
    };
    atomic::write_bytes(path, &bytes).map_err(|cause| ReportError::Write { path: path.to_owned(), cause })
}

/// Draws `trials` (a sweep's, `values` values of its first swept setting) under `title` into
/// `path`, written atomically.
pub fn write_sweep(
    trials: &[sweep::SweptCurves],
    values: usize,
    title: &str,
    path: &Path,
    format: Format,
) -> Result<(), ReportError> {
    if trials.is_empty() {
        return Err(ReportError::Empty);
    }
    save(sweep::draw(trials, values, title).map_err(ReportError::Draw)?, path, format)
}
