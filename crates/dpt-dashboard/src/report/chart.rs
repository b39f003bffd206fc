//! The chart itself: two panels (loss; accuracy, or perplexity for a run without classes)
//! against epochs, or steps for a run measured in steps, with readable ticks (1-2-5 steps on y,
//! whole epochs or round step counts on x), a legend per panel and the lr-change, pause and
//! rewind marks, the branches a rewind abandoned drawn faint.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::SIZE;
use crate::record::curves::{Curves, MarkKind};
use crate::record::{Record, Summary};

const TRAIN_LOSS: RGBColor = RGBColor(214, 120, 0);
const TEST_LOSS: RGBColor = RGBColor(200, 40, 40);
const TRAIN_ACC: RGBColor = RGBColor(20, 130, 40);
const TEST_ACC: RGBColor = RGBColor(120, 40, 170);
const LR_MARK: RGBColor = RGBColor(60, 100, 220);
const PAUSE_MARK: RGBColor = RGBColor(150, 150, 150);
const REWIND_MARK: RGBColor = RGBColor(230, 150, 0);
/// A branch a rewind abandoned, drawn faint under the run's own curves.
const ABANDONED: RGBColor = RGBColor(200, 200, 200);
const FONT: &str = "sans-serif";

/// "RUN — model on [devices] — test acc 0.842 after 10 epochs".
pub fn title(records: &[Record], run_name: &str) -> String {
    let info = records.iter().rev().find_map(|r| if let Record::Start(i) = r { Some(i) } else { None });
    let summary: Option<&Summary> =
        records.iter().rev().find_map(|r| if let Record::Summary(s) = r { Some(&**s) } else { None });
    let last_epoch = records.iter().rev().find_map(|r| if let Record::Epoch(e) = r { Some(e) } else { None });
    let mut t = run_name.to_owned();
    if let Some(i) = info {
        let devices: Vec<String> = i.devices.iter().map(ToString::to_string).collect();
        t.push_str(&format!(" — {} on [{}]", i.model_label(), devices.join(", ")));
    }
    if let (Some(i), Some(e)) = (info.filter(|i| !i.task.has_classes()), last_epoch) {
        // A run without classes: its evaluated loss and perplexity, after its steps.
        let r = &i.settings.recipe;
        let done = match r.steps {
            Some(n) => format!("step {}", (e.epoch * r.eval_periods(n).0).min(n)),
            None => format!("epoch {}", e.epoch),
        };
        let ppl = if i.has_perplexity() {
            format!(" (perplexity {:.2})", e.test_loss.exp())
        } else {
            String::new()
        };
        t.push_str(&format!(" — val loss {:.3}{ppl} at {done}", e.test_loss));
        return t;
    }
    match (summary.and_then(|s| s.test_acc), last_epoch) {
        (_, Some(e)) => t.push_str(&format!(
            " — test acc {:.3} after {} epoch{}",
            e.test_acc,
            e.epoch,
            if e.epoch == 1 { "" } else { "s" }
        )),
        (Some(a), None) => t.push_str(&format!(" — test acc {a:.3}")),
        (None, None) => {}
    }
    t
}

/// A step of 1, 2 or 5 times a power of ten that cuts `span` into at most `max` parts.
pub fn nice_step(span: f64, max: usize) -> f64 {
    let raw = span / max.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw - 1e-12).unwrap_or(10.0 * mag)
}

type Series<'a> = (&'a str, &'a [(f64, f64)], RGBColor);

/// A panel's series, and the points of the branches a rewind abandoned (drawn faint).
type PanelSeries<'a> = (&'a [Series<'a>], &'a [&'a [(f64, f64)]]);

/// The corner of the plot the legend covers the fewest points in: a box about the legend's
/// size (a third of the width, two fifths of the height) in each corner, upper right first on
/// a tie. Accuracy rises into the upper right, where a loss legend belongs.
pub(super) fn legend_corner(
    series: &[&[(f64, f64)]],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    let (w, h) = ((x1 - x0).max(f64::MIN_POSITIVE), (y1 - y0).max(f64::MIN_POSITIVE));
    let covered = |right: bool, upper: bool| {
        let points = series.iter().flat_map(|s| s.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
        points
            .filter(|(x, y)| {
                let (fx, fy) = ((x - x0) / w, (y - y0) / h);
                (if right { fx >= 2.0 / 3.0 } else { fx <= 1.0 / 3.0 })
                    && (if upper { fy >= 0.6 } else { fy <= 0.4 })
            })
            .count()
    };
    [
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::LowerRight, true, false),
        (SeriesLabelPosition::UpperLeft, false, true),
        (SeriesLabelPosition::LowerLeft, false, false),
    ]
    .into_iter()
    .min_by_key(|(_, right, upper)| covered(*right, *upper))
    .map_or(SeriesLabelPosition::UpperRight, |(p, _, _)| p)
}

fn panel(
    area: &DrawingArea<SVGBackend, Shift>,
    curves: &Curves,
    caption: &str,
    (series, abandoned): PanelSeries,
    x_max: f64,
) -> Result<(), String> {
    let mut slices: Vec<&[(f64, f64)]> = series.iter().map(|s| s.1).collect();
    slices.extend(abandoned.iter().copied());
    let Some((mut chart, (y0, y1), x_end)) = panel_axes!(area, caption, curves, &slices, x_max) else {
        return Ok(());
    };
    for (kind, color, name) in [
        (MarkKind::LrChange, LR_MARK, "lr change"),
        (MarkKind::Pause, PAUSE_MARK, "pause"),
        (MarkKind::Rewind, REWIND_MARK, "rewind"),
    ] {
        let xs: Vec<f64> = curves.marks.iter().filter(|(_, k)| *k == kind).map(|(x, _)| *x).collect();
        if xs.is_empty() {
            continue;
        }
        let lines =
            xs.into_iter().map(move |x| PathElement::new(vec![(x, y0), (x, y1)], color.stroke_width(1)));
        chart
            .draw_series(lines)
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y - 6), (x, y + 6)], color.stroke_width(2)));
    }
    let faint: Vec<Series> = abandoned.iter().map(|p| ("abandoned", *p, ABANDONED)).collect();
    for (i, (name, points, color)) in faint.iter().chain(series).enumerate() {
        let color = *color;
        // A point that is not finite (a loss that stopped being finite, the batches a rewind
        // skipped) breaks the line.
        let runs: Vec<&[(f64, f64)]> =
            points.split(|(_, y)| !y.is_finite()).filter(|r| !r.is_empty()).collect();
        let lone = runs.len() == 1 && runs[0].len() == 1;
        // The abandoned branches are named once; every other series once.
        let mut named = i > 0 && i < faint.len();
        for run in runs {
            let drawn = if lone {
                chart.draw_series(run.iter().map(|p| Circle::new(*p, 4, color.filled())))
            } else {
                chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))
            }
            .map_err(|e| e.to_string())?;
            if !named {
                drawn
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3)));
                named = true;
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

/// Draws `curves` under `title`; returns the SVG document.
pub fn draw(curves: &Curves, title: &str) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root.titled(title, (FONT, 20)).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(SIZE.1 as i32 / 2 - 16);
        let x_max = (curves.epochs as f64).max(curves.x).max(1.0);
        let loss = [
            ("train loss", &curves.train_loss[..], TRAIN_LOSS),
            ("test loss", &curves.test_loss[..], TEST_LOSS),
        ];
        let abandoned_loss: Vec<&[(f64, f64)]> =
            curves.abandoned.iter().flat_map(|b| [&b.train_loss[..], &b.test_loss[..]]).collect();
        panel(&top, curves, "loss", (&loss, &abandoned_loss), x_max)?;
        let ppl = curves.perplexity();
        let abandoned_ppl: Vec<[Vec<(f64, f64)>; 2]> =
            curves.abandoned.iter().map(Curves::perplexity).collect();
        let abandoned_below: Vec<&[(f64, f64)]> = match (curves.no_classes, curves.has_perplexity) {
            (true, true) => abandoned_ppl.iter().flat_map(|p| p.iter().map(Vec::as_slice)).collect(),
            (true, false) => curves.abandoned.iter().map(|b| &b.test_loss[..]).collect(),
            (false, _) => curves.abandoned.iter().flat_map(|b| [&b.train_acc[..], &b.test_acc[..]]).collect(),
        };
        let (name, below): (&str, Vec<Series>) = match (curves.no_classes, curves.has_perplexity) {
            (true, true) => {
                ("perplexity", vec![("train ppl", &ppl[0], TRAIN_ACC), ("test ppl", &ppl[1], TEST_ACC)])
            }
            // A regression's or a segmentation's loss has no perplexity: the evaluated loss alone.
            (true, false) => ("test loss", vec![("test loss", &curves.test_loss, TEST_LOSS)]),
            (false, _) => (
                "accuracy",
                vec![("train acc", &curves.train_acc, TRAIN_ACC), ("test acc", &curves.test_acc, TEST_ACC)],
            ),
        };
        panel(&bottom, curves, name, (&below, &abandoned_below), x_max)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{legend_corner, nice_step};
    use plotters::prelude::SeriesLabelPosition;

    #[test]
    fn a_run_without_classes_is_titled_by_its_loss_and_drawn_with_perplexity() {
        use crate::record::{curves::Curves, EpochStats, Record, RunInfo};
        let mut info =
            RunInfo { task: crate::model::Task::ModelLoss, steps_per_epoch: 50, ..RunInfo::default() };
        let r = &mut info.settings.recipe;
        (r.steps, r.eval_every, r.epochs) = (Some(150), Some(50), 3);
        info.settings.data.block_size = Some(64);
        let epoch = EpochStats {
            epoch: 2,
            train_loss: 1.6,
            test_loss: 1.5,
            epoch_seconds: 1.0,
            eval_seconds: 0.1,
            samples_per_sec: 100.0,
            lr: 1e-3,
            ..EpochStats::default()
        };
        let records = vec![Record::Start(Box::new(info)), Record::Epoch(Box::new(epoch))];
        let title = super::title(&records, "run");
        assert!(title.ends_with("val loss 1.500 (perplexity 4.48) at step 100"), "{title}");
        let svg = super::draw(&Curves::of(&records), &title).unwrap();
        assert!(svg.contains("perplexity") && !svg.contains("test acc"), "the lower panel is perplexity");
        // The x axis counts steps (3 evaluation periods of 50, ticks every 20), not periods.
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(texts.contains(&"step") && !texts.contains(&"epoch"), "x is labelled in steps");
        assert!(texts.contains(&"100") && texts.contains(&"140"), "tick labels in steps");
    }

    #[test]
    fn the_legend_goes_where_the_curves_are_not() {
        let rising: Vec<(f64, f64)> = (0..=10).map(|e| (f64::from(e), 0.5 + 0.045 * f64::from(e))).collect();
        let falling: Vec<(f64, f64)> = rising.iter().map(|&(x, y)| (x, 1.5 - y)).collect();
        let at = |s: &[(f64, f64)]| legend_corner(&[s], (0.0, 10.0), (0.4, 1.0));
        assert!(
            matches!(at(&rising), SeriesLabelPosition::LowerRight),
            "accuracy rises into the upper right"
        );
        assert!(matches!(at(&falling), SeriesLabelPosition::UpperRight), "a loss leaves it free");
    }

    #[test]
    fn steps_are_one_two_five() {
        assert_eq!(nice_step(10.0, 10), 1.0);
        assert_eq!(nice_step(1.7, 6), 0.5);
        assert_eq!(nice_step(0.06, 6), 0.01);
        assert_eq!(nice_step(100.0, 10), 10.0);
        assert_eq!(nice_step(30.0, 10), 5.0);
    }
}
