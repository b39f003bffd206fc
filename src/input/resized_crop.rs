//! torchvision's `RandomResizedCrop(size, scale, ratio)` for the streaming loader: a region of
//! the decoded image, drawn as `RandomResizedCrop.get_params` draws it, resized to the split's
//! size; and the evaluation's `Resize(side)` + `CenterCrop(size)` that goes with it. Each
//! sample's region is a pure function of (seed, epoch, sample) and the image's size.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::data::stream::Fit;
use dpt_core::seed::mix_seed;

pub use dpt_core::augment::{ResizedCrop, CROP_SHARE};

/// The region of an image of `(height, width)` sample `sample` of `epoch` is cropped to.
pub fn region(crop: &ResizedCrop, seed: u64, epoch: usize, sample: i64, (height, width): (u32, u32)) -> Fit {
    // A stream of its own: the shuffles, the flips and dropout use other derivations.
    let stream = mix_seed(mix_seed(seed ^ 0x7272_635f_6372_6f70, epoch as u64), sample as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(stream);
    let (top, left, h, w) = params(crop, (height, width), || rng.random::<f64>());
    Fit::Region { top, left, height: h, width: w }
}

/// `get_params`: `(top, left, h, w)` (its `i, j, h, w`) for an image of `(height, width)`,
/// each random number `next()` in [0, 1) from the sample's stream. Ten tries at a region of the drawn area and
/// ratio that fits, its corner then drawn uniformly; else the whole image, clamped to the
/// ratio range, centred. The area share and the log-ratio are float32, as torch draws them.
pub fn params(
    crop: &ResizedCrop,
    (height, width): (u32, u32),
    mut next: impl FnMut() -> f64,
) -> (u32, u32, u32, u32) {
    let area = f64::from(height) * f64::from(width);
    let uniform = |a: f64, b: f64, u: f64| f64::from((a + (b - a) * u) as f32);
    let (lo, hi) = (f64::from(crop.ratio.0.ln() as f32), f64::from(crop.ratio.1.ln() as f32));
    for _ in 0..10 {
        let target = area * uniform(crop.scale.0, crop.scale.1, next());
        let aspect = f64::from(uniform(lo, hi, next()).exp() as f32);
        // Python's round(): halves to even.
        let w = (target * aspect).sqrt().round_ties_even();
        let h = (target / aspect).sqrt().round_ties_even();
        if w > 0.0 && w <= f64::from(width) && h > 0.0 && h <= f64::from(height) {
            let (h, w) = (h as u32, w as u32);
            // randint(0, n): the corner's row, then its column.
            let top = ((next() * f64::from(height - h + 1)) as u32).min(height - h);
            let left = ((next() * f64::from(width - w + 1)) as u32).min(width - w);
            return (top, left, h, w);
        }
    }
    let in_ratio = f64::from(width) / f64::from(height);
    let (h, w) = if in_ratio < crop.ratio.0 {
        ((f64::from(width) / crop.ratio.0).round_ties_even() as u32, width)
    } else if in_ratio > crop.ratio.1 {
        (height, (f64::from(height) * crop.ratio.1).round_ties_even() as u32)
    } else {
        (height, width)
    };
    ((height - h) / 2, (width - w) / 2, h, w)
}

/// The evaluation's fit for crops `height` pixels high: the shorter side resized to
/// `height / 0.875` (256 for 224), then the centre crop.
pub fn evaluation(height: u32) -> Fit {
    Fit::ResizeCenter { side: (f64::from(height) / CROP_SHARE).floor() as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_stay_inside_the_image_within_the_scale_and_ratio() {
        let crop = ResizedCrop::new();
        assert_eq!(evaluation(224), Fit::ResizeCenter { side: 256 });
        for sample in 0..500 {
            let Fit::Region { top, left, height, width } = region(&crop, 3, 1, sample, (375, 500)) else {
                panic!("a region")
            };
            assert!(top + height <= 375 && left + width <= 500);
            let share = f64::from(height * width) / (375.0 * 500.0);
            let ratio = f64::from(width) / f64::from(height);
            assert!((0.07..=1.0).contains(&share), "{share}");
            assert!((0.74..=1.34).contains(&ratio), "{ratio}");
        }
        assert_eq!(region(&crop, 3, 1, 7, (375, 500)), region(&crop, 3, 1, 7, (375, 500)));
        assert_ne!(region(&crop, 3, 1, 7, (375, 500)), region(&crop, 3, 2, 7, (375, 500)));
    }
}
