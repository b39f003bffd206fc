//! Training-time augmentation of resident data, on the device, batch at once: torchvision's
//! `RandomCrop(size, padding=P)` (zero padding of P on every side, then a crop of the image's
//! own size at a top-left corner drawn uniformly from `0..=2P` in each direction) followed by
//! `RandomHorizontalFlip(p=0.5)`, applied to the stored values before normalization, as
//! `Compose([RandomCrop, RandomHorizontalFlip, ToTensor, Normalize])` orders them. Each
//! sample's draw is a pure function of (seed, epoch, sample index), so it depends neither on
//! the replica count nor on thread timing, and a resumed run draws what a straight one does.

use tch::{Kind, Tensor};

use dpt_core::seed::mix_seed;

pub use dpt_core::augment::{Augment, Preset};

/// One sample's draw: the crop's top-left corner in the padded image, and the flip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    pub top: i64,
    pub left: i64,
    pub flip: bool,
}

/// The draw for `sample` in `epoch` of a run seeded `seed`.
pub fn draw(augment: &Augment, seed: u64, epoch: usize, sample: i64) -> Draw {
    // A stream of its own: the shuffles and dropout use other derivations of the seed.
    let r = mix_seed(mix_seed(seed ^ 0x6175_676d_656e_7421, epoch as u64), sample as u64);
    let span = u64::from(augment.crop_padding.unwrap_or(0)) * 2 + 1;
    Draw {
        top: ((r & 0xffff_ffff) % span) as i64,
        left: ((r >> 32 & 0xffff) % span) as i64,
        flip: augment.hflip && (r >> 48) & 1 == 1,
    }
}

/// Augments `raw` (`[n, C, H, W]`, stored values) with one draw per sample; returns the
/// batch at its own size.
pub fn apply(augment: &Augment, raw: &Tensor, draws: &[Draw]) -> Tensor {
    let [n, _, h, w] = raw.size()[..] else { return raw.shallow_clone() };
    let device = raw.device();
    let pad = i64::from(augment.crop_padding.unwrap_or(0));
    let padded = if pad > 0 { raw.constant_pad_nd([pad, pad, pad, pad]) } else { raw.shallow_clone() };
    // The three columns in one copy from page-locked memory, which does not block (a blocking
    // copy from pageable memory would drain the device's stream every step).
    let host: Vec<i64> = [|d: &Draw| d.top, |d: &Draw| d.left, |d: &Draw| i64::from(d.flip)]
        .iter()
        .flat_map(|f| draws.iter().map(f))
        .collect();
    let host = super::pinned(Tensor::from_slice(&host).view([3, n, 1]), device);
    let columns = host.to_device_(device, Kind::Int64, true, false);
    let (tops, lefts, flips) = (columns.get(0), columns.get(1), columns.get(2));
    let along = |len: i64| Tensor::arange(len, (Kind::Int64, device)).view([1, len]);
    let rows = &tops + along(h);
    // A flipped crop reads its columns right to left.
    let forward = along(w);
    let backward = forward.flip([1]);
    let cols = &lefts + (&flips * &backward + (flips.ones_like() - &flips) * &forward);
    let samples = Tensor::arange(n, (Kind::Int64, device)).view([n, 1, 1]);
    // [n, H', W', C] indexed by (sample, row, column) gives [n, H, W, C].
    padded
        .permute([0, 2, 3, 1])
        .index(&[Some(samples), Some(rows.view([n, h, 1])), Some(cols.view([n, 1, w]))])
        .permute([0, 3, 1, 2])
        // Laid out as the batch came (NCHW): the network sees the layout unaugmented and
        // streamed batches have, so its kernels (and their sums' order) are the same.
        .contiguous()
}

/// One sample's crop and flip on the host, as `apply` does on the device: `raw` and `out`
/// planar `[C, H, W]` bytes of one shape (the streaming loader's decode threads call this).
pub fn apply_one(augment: &Augment, draw: Draw, raw: &[u8], out: &mut [u8], (h, w): (usize, usize)) {
    let pad = augment.crop_padding.unwrap_or(0) as i64;
    let (hi, wi) = (h as i64, w as i64);
    for (plane_in, plane_out) in raw.chunks_exact(h * w).zip(out.chunks_exact_mut(h * w)) {
        for y in 0..hi {
            let r = y + draw.top - pad;
            let row_out = &mut plane_out[(y * wi) as usize..((y + 1) * wi) as usize];
            if !(0..hi).contains(&r) {
                row_out.fill(0);
                continue;
            }
            let row_in = &plane_in[(r * wi) as usize..((r + 1) * wi) as usize];
            for (x, v) in row_out.iter_mut().enumerate() {
                // A flipped crop reads its columns right to left.
                let x = if draw.flip { wi - 1 - x as i64 } else { x as i64 };
                let c = x + draw.left - pad;
                *v = if (0..wi).contains(&c) { row_in[c as usize] } else { 0 };
            }
        }
    }
}

/// The draws for the samples `ids` (indices into the training set) in `epoch`.
pub fn draws(augment: &Augment, seed: u64, epoch: usize, ids: &[i64]) -> Vec<Draw> {
    ids.iter().map(|&i| draw(augment, seed, epoch, i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crop_and_flip_read_the_padded_image_as_torchvision_defines_them() {
        // One 1x2x3 image, values 1..=6; padding 1 makes it 4x5 with a zero border.
        let raw = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6]).view([1, 1, 2, 3]);
        let a = Augment { crop_padding: Some(1), hflip: true, resized_crop: None };
        let at = |top, left, flip| {
            let out = apply(&a, &raw, &[Draw { top, left, flip }]);
            Vec::<u8>::try_from(out.contiguous().view([-1])).expect("u8")
        };
        assert_eq!(at(1, 1, false), [1, 2, 3, 4, 5, 6], "the centre crop is the image");
        assert_eq!(at(0, 0, false), [0, 0, 0, 0, 1, 2], "top-left: the border, then the image");
        assert_eq!(at(2, 2, false), [5, 6, 0, 0, 0, 0]);
        assert_eq!(at(1, 1, true), [3, 2, 1, 6, 5, 4], "flipped after the crop");
    }

    #[test]
    fn one_sample_on_the_host_is_the_batch_on_the_device() {
        let a = Augment { crop_padding: Some(2), hflip: true, resized_crop: None };
        let raw: Vec<u8> = (1..=2 * 3 * 4).collect();
        let batch = Tensor::from_slice(&raw).view([1, 2, 3, 4]);
        for (top, left, flip) in [(0, 0, false), (2, 2, false), (4, 3, true), (1, 0, true), (3, 4, false)] {
            let d = Draw { top, left, flip };
            let device: Vec<u8> = Vec::try_from(apply(&a, &batch, &[d]).contiguous().view([-1])).unwrap();
            let mut host = vec![9u8; raw.len()];
            apply_one(&a, d, &raw, &mut host, (3, 4));
            assert_eq!(host, device, "{d:?}");
        }
    }

    #[test]
    fn draws_cover_every_offset_and_depend_on_sample_and_epoch_only() {
        let a = Preset::Cifar.augment();
        let mut seen = [[false; 9]; 2];
        let mut flips = 0;
        for s in 0..2000 {
            let d = draw(&a, 7, 3, s);
            seen[0][d.top as usize] = true;
            seen[1][d.left as usize] = true;
            flips += usize::from(d.flip);
        }
        assert!(seen.iter().flatten().all(|&b| b), "0..=8 in both directions");
        assert!((900..1100).contains(&flips), "about half flipped: {flips}");
        assert_eq!(draw(&a, 7, 3, 11), draw(&a, 7, 3, 11));
        assert_ne!(
            (0..20).map(|s| draw(&a, 7, 3, s)).collect::<Vec<_>>(),
            (0..20).map(|s| draw(&a, 7, 4, s)).collect::<Vec<_>>()
        );
        let none = Preset::None.augment();
        assert!(none.is_none() && draw(&none, 7, 3, 1) == Draw { top: 0, left: 0, flip: false });
    }
}
