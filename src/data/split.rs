//! One split of a data set (train, test or validation): its samples' pixels, in memory or read
//! as training reaches them, and their labels or targets; selecting and limiting samples.

/// The pixels of a split, `[n, channels, rows, cols]` in row-major order: bytes (scaled by
/// 1/255 before normalization) or floats (normalized as they are).
#[derive(Debug, Clone, PartialEq)]
pub enum Pixels {
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
    /// Not in memory: where each sample's encoded image is, decoded to bytes as training
    /// reaches it (`--loader stream`).
    Streamed(super::stream::Streamed),
    /// Windows of a token file, read as training reaches them (their targets with them).
    Tokens(super::tokens::TokenWindows),
}

impl Pixels {
    /// Number of values in memory (none for streamed samples).
    pub fn len(&self) -> usize {
        match self {
            Pixels::Bytes(v) => v.len(),
            Pixels::Floats(v) => v.len(),
            Pixels::Streamed(_) | Pixels::Tokens(_) => 0,
        }
    }

    /// Whether there is no value in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the first `n` samples of `per` values each.
    fn truncate(&mut self, n: usize, per: usize) {
        match self {
            Pixels::Bytes(v) => v.truncate(n * per),
            Pixels::Floats(v) => v.truncate(n * per),
            Pixels::Streamed(s) => s.entries.truncate(n),
            Pixels::Tokens(w) => w.count = w.count.min(n),
        }
    }

    /// The samples at `indices` (of `per` values each), in that order.
    fn select(&self, indices: &[usize], per: usize) -> Pixels {
        let rows =
            |v: &[u8]| indices.iter().flat_map(|&i| v[i * per..(i + 1) * per].iter().copied()).collect();
        match self {
            Pixels::Bytes(v) => Pixels::Bytes(rows(v)),
            Pixels::Floats(v) => Pixels::Floats(
                indices.iter().flat_map(|&i| v[i * per..(i + 1) * per].iter().copied()).collect(),
            ),
            Pixels::Streamed(s) => Pixels::Streamed(s.select(indices)),
            // Windows are drawn, not stored: a selection is as many windows.
            Pixels::Tokens(w) => {
                Pixels::Tokens(super::tokens::TokenWindows { count: indices.len(), ..w.clone() })
            }
        }
    }

    /// What one unit of the stored values is on the `[0, 1]` scale: 1/255 for bytes (and
    /// streamed images, which decode to bytes).
    pub fn unit(&self) -> f64 {
        match self {
            Pixels::Bytes(_) | Pixels::Streamed(_) => 1.0 / 255.0,
            Pixels::Floats(_) | Pixels::Tokens(_) => 1.0,
        }
    }

    /// Whether the samples are read from storage as training goes.
    pub fn is_streamed(&self) -> bool {
        matches!(self, Pixels::Streamed(_))
    }
}

/// One split (train or test): `len` images of `channels`×`rows`×`cols` values and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub images: Pixels,
    /// Class ids, one per sample (empty where `targets` holds the samples' targets).
    pub labels: Vec<i64>,
    pub channels: usize,
    pub rows: usize,
    pub cols: usize,
    /// Targets that are not class ids (`None`: the labels are the targets).
    pub targets: Option<super::targets::Targets>,
}

impl Split {
    /// A split of single-channel byte images (the IDX layout).
    pub fn gray(images: Vec<u8>, labels: Vec<i64>, rows: usize, cols: usize) -> Split {
        Split { images: Pixels::Bytes(images), labels, channels: 1, rows, cols, targets: None }
    }

    /// Number of samples (of token data: windows).
    pub fn len(&self) -> usize {
        match &self.images {
            Pixels::Tokens(w) => w.count,
            _ => self.targets.as_ref().map_or(self.labels.len(), super::targets::Targets::len),
        }
    }

    /// Whether the split holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values per sample.
    pub fn sample_len(&self) -> usize {
        self.channels * self.rows * self.cols
    }

    /// The shape of one sample, `[channels, rows, cols]`.
    pub fn sample_shape(&self) -> [i64; 3] {
        [self.channels as i64, self.rows as i64, self.cols as i64]
    }

    /// A copy of the first `n` samples (all of them when `n` is larger).
    pub fn head(&self, n: usize) -> Split {
        self.select(&(0..n.min(self.len())).collect::<Vec<_>>())
    }

    /// The samples at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Split {
        Split {
            images: self.images.select(indices, self.sample_len()),
            labels: indices.iter().filter_map(|&i| self.labels.get(i).copied()).collect(),
            targets: self.targets.as_ref().map(|t| t.select(indices)),
            ..*self
        }
    }

    /// This split with its samples in memory: streamed ones decoded (those that do not decode
    /// left out); for the few samples a check needs, never a whole data set.
    pub fn materialized(&self) -> Split {
        match &self.images {
            Pixels::Streamed(s) => s.decode_split(self),
            _ => self.clone(),
        }
    }

    /// Keeps `n` samples spread evenly over the split (sample `⌊i·len/n⌋` for each `i < n`; all
    /// of them when `n` is larger), so a split stored class by class (an image folder, shards)
    /// keeps every class. Token windows are drawn anywhere in the file: the first `n` are kept.
    pub fn limit(&mut self, n: usize) {
        let len = self.len();
        if n >= len {
            return;
        }
        if matches!(self.images, Pixels::Tokens(_)) {
            self.truncate(n);
            return;
        }
        let picked: Vec<usize> = (0..n).map(|i| (i as u128 * len as u128 / n as u128) as usize).collect();
        *self = self.select(&picked);
    }

    /// How many distinct classes the labels hold.
    pub fn classes_present(&self) -> usize {
        let mut seen: Vec<i64> = self.labels.clone();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Keeps the first `n` samples (all of them when `n` is larger).
    pub fn truncate(&mut self, n: usize) {
        let n = n.min(self.len());
        self.labels.truncate(n);
        if let Some(t) = &mut self.targets {
            t.truncate(n);
        }
        self.images.truncate(n, self.sample_len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_spreads_over_a_class_ordered_split_and_keeps_every_class() {
        // 10 classes of 60 samples each, stored class by class (an image folder's order).
        let labels: Vec<i64> = (0..600).map(|i| i / 60).collect();
        let images: Vec<u8> = (0..600u32).map(|i| (i % 251) as u8).collect();
        let mut split = Split::gray(images, labels, 1, 1);
        assert_eq!(split.head(192).classes_present(), 4, "the first 192 hold 4 classes");
        split.limit(192);
        assert_eq!((split.len(), split.classes_present()), (192, 10));
        // Sample i of the 192 is sample ⌊i·600/192⌋, pixels with their labels.
        let Pixels::Bytes(px) = &split.images else { panic!("bytes") };
        assert_eq!(&px[..4], &[0, 3, 6, 9]);
        assert_eq!(split.labels[191], 9);
        split.limit(1000);
        assert_eq!(split.len(), 192, "a limit above the count keeps all");
    }
}
