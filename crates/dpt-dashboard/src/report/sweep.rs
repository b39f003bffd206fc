//! `dpt-tui show SWEEP --png FILE`: every trial's evaluation curves in one picture, coloured by
//! the first swept setting's value (its values in order, red to violet), the trials of one value
//! in one colour with one legend entry. Two panels against epochs (steps for runs measured in
//! steps): the evaluated loss, and the accuracy (the perplexity for language models, the
//! training loss for other runs without classes).

use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart::legend_corner;
use super::SIZE;
use crate::record::curves::Curves;

const FONT: &str = "sans-serif";

/// One trial's curves, and the value of the first swept setting it ran with, as the legend
/// names it (`lr=0.05`), with its place among that setting's values.
pub struct SweptCurves {
    pub value: String,
    pub rank: usize,
    pub curves: Curves,
}

/// The colour of value `rank` of `count`: hues from red to violet.
fn colour(rank: usize, count: usize) -> RGBColor {
    let h = if count <= 1 { 0.0 } else { 0.78 * rank as f64 / (count - 1) as f64 };
    let RGBAColor(r, g, b, _) = HSLColor(h, 0.75, 0.45).to_rgba();
    RGBColor(r, g, b)
}

/// What the lower panel shows for `c`, and its points.
fn lower(c: &Curves) -> (&'static str, Vec<(f64, f64)>) {
    match (c.no_classes, c.has_perplexity) {
        (true, true) => ("test perplexity", c.perplexity()[1].clone()),
        (true, false) => ("train loss", c.train_loss.clone()),
        (false, _) => ("test accuracy", c.test_acc.clone()),
    }
}

/// The SVG document of `trials` under `title`.
pub fn draw(trials: &[SweptCurves], values: usize, title: &str) -> Result<String, String> {
    let first = trials.first().ok_or("no trial has a recorded epoch yet")?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root.titled(title, (FONT, 20)).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(SIZE.1 as i32 / 2 - 16);
        let x_max = trials.iter().map(|t| (t.curves.epochs as f64).max(t.curves.x)).fold(1.0, f64::max);
        let loss: Vec<Vec<(f64, f64)>> = trials.iter().map(|t| t.curves.test_loss.clone()).collect();
        panel(&top, first, "test loss", trials, &loss, (values, x_max))?;
        let (name, _) = lower(&first.curves);
        let below: Vec<Vec<(f64, f64)>> = trials.iter().map(|t| lower(&t.curves).1).collect();
        panel(&bottom, first, name, trials, &below, (values, x_max))?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn panel(
    area: &DrawingArea<SVGBackend, Shift>,
    first: &SweptCurves,
    caption: &str,
    trials: &[SweptCurves],
    points: &[Vec<(f64, f64)>],
    (values, x_max): (usize, f64),
) -> Result<(), String> {
    let slices: Vec<&[(f64, f64)]> = points.iter().map(Vec::as_slice).collect();
    let Some((mut chart, (y0, y1), x_end)) = panel_axes!(area, caption, &first.curves, &slices, x_max) else {
        return Ok(());
    };
    let mut named = vec![false; values];
    for (t, pts) in trials.iter().zip(points) {
        let color = colour(t.rank, values);
        let runs: Vec<&[(f64, f64)]> = pts.split(|(_, y)| !y.is_finite()).filter(|r| !r.is_empty()).collect();
        for run in runs {
            let drawn = if run.len() == 1 {
                chart.draw_series(run.iter().map(|p| Circle::new(*p, 4, color.filled())))
            } else {
                chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))
            }
            .map_err(|e| e.to_string())?;
            // One legend entry per value, however many trials (seeds) ran with it.
            if let Some(n) = named.get_mut(t.rank).filter(|n| !**n) {
                drawn
                    .label(t.value.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3)));
                *n = true;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(legend_corner(&slices, (0.0, x_end), (y0, y1)))
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_get_distinct_colours_from_red_to_violet() {
        let (a, b, c) = (colour(0, 3), colour(1, 3), colour(2, 3));
        assert!(a != b && b != c && a != c);
        assert!(a.0 > a.2, "the first is red: {a:?}");
        assert!(c.2 > c.1, "the last is violet: {c:?}");
        assert_eq!(colour(0, 1), colour(0, 1));
    }

    #[test]
    fn every_value_is_named_once_in_the_picture() {
        let curves = |acc: f64| Curves {
            test_loss: vec![(1.0, 1.0 - acc), (2.0, 0.9 - acc)],
            test_acc: vec![(1.0, acc), (2.0, acc + 0.1)],
            x: 2.0,
            epochs: 2,
            ..Curves::default()
        };
        let trials: Vec<SweptCurves> = [(0, 0.5), (0, 0.55), (1, 0.6)]
            .iter()
            .map(|&(rank, acc)| SweptCurves { value: format!("lr={rank}"), rank, curves: curves(acc) })
            .collect();
        let svg = draw(&trials, 2, "sweep").unwrap();
        assert_eq!(svg.matches("\nlr=0\n").count(), 2, "once per panel");
        assert_eq!(svg.matches("\nlr=1\n").count(), 2);
        assert!(svg.contains("test accuracy") && svg.contains("test loss"));
    }
}
