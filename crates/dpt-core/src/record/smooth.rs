//! Exponential smoothing of a curve as TensorBoard's scalar dashboard defines it: a running
//! average `last = last · w + (1 − w) · y`, divided by `1 − w^n` after `n` finite points so the
//! start is not pulled towards 0 (the debiasing of Adam's moment estimates); non-finite points
//! pass through unsmoothed, and a constant series is left as it is.

use std::borrow::Cow;

/// The weights the dashboard's smoothing key cycles through (0: off).
pub const WEIGHTS: [f64; 4] = [0.0, 0.6, 0.9, 0.99];

/// `points` smoothed with weight `w` in `[0, 1)`; borrowed as they are when there is nothing
/// to smooth (the dashboard draws every frame through this).
pub fn ema(points: &[(f64, f64)], w: f64) -> Cow<'_, [(f64, f64)]> {
    if w <= 0.0 {
        return Cow::Borrowed(points);
    }
    let first = points.first().map(|p| p.1);
    if first.is_some_and(|f| points.iter().all(|p| p.1 == f)) {
        return Cow::Borrowed(points);
    }
    let mut last = 0.0;
    let mut n = 0;
    Cow::Owned(
        points
            .iter()
            .map(|&(x, y)| {
                if !y.is_finite() {
                    return (x, y);
                }
                last = last * w + (1.0 - w) * y;
                n += 1;
                (x, last / (1.0 - w.powi(n)))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorBoard's loop, written out step by step for a known series.
    #[test]
    fn matches_tensorboards_formula_on_a_known_series() {
        let ys = [1.0, 0.5, 0.8, f64::NAN, 0.2];
        let points: Vec<(f64, f64)> = ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect();
        let got = ema(&points, 0.6);
        // last: 0.4, 0.44, 0.584, (NaN skipped), 0.4304; debias by 1 - 0.6^n for n = 1, 2, 3, 4.
        let want = [0.4 / 0.4, 0.44 / 0.64, 0.584 / 0.784, f64::NAN, 0.4304 / 0.8704];
        for ((x, g), (i, w)) in got.iter().zip(want.iter().enumerate()) {
            assert_eq!(*x, i as f64);
            assert!(g.is_nan() && w.is_nan() || (g - w).abs() < 1e-12, "point {i}: {g} vs {w}");
        }
        // The first point is itself (debiased), not pulled towards 0.
        assert_eq!(ema(&points, 0.99)[0].1, 1.0);
    }

    #[test]
    fn off_and_constant_series_are_unchanged() {
        let p = [(0.0, 2.0), (1.0, 3.0)];
        assert!(matches!(ema(&p, 0.0), Cow::Borrowed(_)));
        assert_eq!(ema(&p, 0.0).to_vec(), p.to_vec());
        let flat = [(0.0, 0.5), (1.0, 0.5), (2.0, 0.5)];
        assert_eq!(ema(&flat, 0.9).to_vec(), flat.to_vec());
        assert!(ema(&[], 0.9).is_empty());
    }
}
