//! The image-classification data set held in host memory, whatever format it came in (see
//! `format`): splits of same-shaped images with integer labels.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::idx::IdxError;

pub use dpt_protocol::data::DEFAULT_DATA_DIR;
/// Height and width of the images every model takes.
pub const IMAGE_SIDE: usize = 28;
/// Number of classes in (Fashion-)MNIST.
pub const NUM_CLASSES: u8 = 10;

/// What can go wrong while loading a data set.
#[derive(Debug, Error)]
pub enum DataError {
    #[error("no {file}[.gz] in {dir}: install Fashion-MNIST with 'apt-get install dataset-fashion-mnist' or point --data (or $DPT_DATA) at a folder holding the four IDX files")]
    Missing { dir: PathBuf, file: &'static str },
    #[error(transparent)]
    Idx(#[from] IdxError),
    #[error("{images} holds {n_images} images but {labels} holds {n_labels} labels; the two files must come from the same set")]
    CountMismatch { images: PathBuf, n_images: usize, labels: PathBuf, n_labels: usize },
    #[error("{path} holds {rows}x{cols} images; the models take 28x28 images (MNIST or Fashion-MNIST)")]
    ImageSize { path: PathBuf, rows: usize, cols: usize },
    #[error("{path}: label {label} at index {index} is outside 0..{max}; the file is corrupt, download or reinstall it")]
    LabelOutOfRange { path: PathBuf, index: usize, label: i64, max: i64 },
    #[error("cannot tell what {path} holds; --data takes a folder of IDX files (train-images-idx3-ubyte[.gz] ...), of CIFAR-10 binary batches (data_batch_1.bin ... test_batch.bin), an image folder (train/<class>/*.png|jpg and test/<class>/*), a .npz or .safetensors file, a folder of x_train.npy, y_train.npy, x_test.npy, y_test.npy, token files (train.bin, val.bin) or .txt files; --data-format names the format")]
    Unknown { path: PathBuf },
    #[error("cannot read {path}: {why}")]
    Read { path: PathBuf, why: String },
    #[error("no {file} in {dir}; a CIFAR-10 binary folder holds data_batch_1.bin to data_batch_5.bin and test_batch.bin")]
    CifarMissing { dir: PathBuf, file: String },
    #[error("{path} is not a CIFAR-10 binary batch: {len} bytes is not a whole number of 3,073-byte records (a label byte and 3x32x32 pixels); download it again")]
    CifarSize { path: PathBuf, len: usize },
    #[error("{dir} has no class folders; an image folder holds {dir}/<class>/<image> for each class")]
    NoClasses { dir: PathBuf },
    #[error("{path}: class '{class}' is not among the training classes {known:?}")]
    UnknownClass { path: PathBuf, class: String, known: Vec<String> },
    #[error("{path} does not decode as an image ({why}); remove or replace it")]
    Decode { path: PathBuf, why: String },
    #[error("{path} is cut short (a failed copy?): the file ends at byte {has}, {at}; the other {whole} of {shards} shards of its split read whole: copy it again, or move it out of the folder to train on the others without its samples")]
    ShardCut { path: PathBuf, at: String, has: u64, whole: usize, shards: usize },
    #[error("{path} is {found_h}x{found_w} but the first image is {h}x{w}; make every image the same size, or pass --image-size H,W to resize them")]
    MixedSizes { path: PathBuf, found_h: u32, found_w: u32, h: u32, w: u32 },
    #[error("{count} of {total} images do not decode, more than the {allowed} allowed (--max-bad-images {fraction}); the first: {first}: {why}")]
    TooManyUndecodable {
        count: usize,
        total: usize,
        allowed: usize,
        fraction: f64,
        first: PathBuf,
        why: String,
    },
    #[error("{path} has no array '{name}'; it needs x_train, y_train, x_test and y_test")]
    ArrayMissing { path: PathBuf, name: String },
    #[error("{path}: '{name}' has shape {shape:?}; {expected}")]
    ArrayShape { path: PathBuf, name: String, shape: Vec<u64>, expected: &'static str },
    #[error("{path}: '{name}' is {dtype}; images must be uint8 or float32/float64, labels integers")]
    ArrayType { path: PathBuf, name: String, dtype: String },
    #[error("{path}: {images} holds {n_images} samples but {labels} holds {n_labels} labels")]
    ArrayCounts { path: PathBuf, images: String, n_images: usize, labels: String, n_labels: usize },
    #[error("{path}: {bytes} bytes is not a whole number of {dtype} tokens; a token file holds little-endian token ids (--token-dtype u16 or u32): was it written with another dtype, or cut short?")]
    TokenLength { path: PathBuf, bytes: u64, dtype: &'static str },
    #[error("token data in {dir} needs --block-size T: the tokens the model sees at once (at most its context length)")]
    NoBlockSize { dir: PathBuf },
    #[error(
        "the .txt files in {dir} make {tokens} tokens, too few to split into training and validation text"
    )]
    TextTooShort { dir: PathBuf, tokens: u64 },
    #[error("{path}: y_train holds {train} but y_test {test}; both must be class ids ([N] or [N, 1] integers) or targets of one shape and type")]
    TargetKinds { path: PathBuf, train: String, test: String },
    #[error("{path}: token id {id} (at token {offset}) is beyond the model's vocabulary of {vocab}; tokenize the data for this model (or check --token-dtype), or give the model a larger vocabulary")]
    TokenBeyondVocab { path: PathBuf, id: u32, offset: u64, vocab: i64 },
    #[error("{path}: {why}; give --tokenizer a Hugging Face tokenizer.json (tokenizer.save() writes one), or leave it out to train on the text's bytes")]
    Tokenizer { path: PathBuf, why: String },
    #[error("no {file} in {dir}; token data is a folder with train.bin and val.bin (nanoGPT's prepare.py writes them)")]
    TokensMissing { dir: PathBuf, file: String },
    #[error("{path} holds {tokens} tokens, too few for one window of --block-size {block} and its next token; use a smaller --block-size")]
    BlockTooLong { path: PathBuf, tokens: u64, block: usize },
    #[error("the training images are {train:?} but the test images are {test:?} (in {path}); both splits must have one shape")]
    SplitShapes { path: PathBuf, train: Vec<i64>, test: Vec<i64> },
}

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

/// The training and test splits of one data set, and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub train: Split,
    pub test: Split,
    /// A validation split carved from the training set (`--val-fraction`): evaluated every
    /// epoch in the test set's place, the test set kept for the end.
    pub val: Option<Split>,
    /// The test split is the data set's own validation folder (`train/` and `val/` without
    /// `test/`): its figures are named "val" on screens.
    pub test_is_val: bool,
    /// Images that did not decode and were left out (`path: why`), within the allowed share.
    pub skipped: Vec<String>,
    /// What was loaded, for records and screens: `Fashion-MNIST/MNIST IDX files in DIR`.
    pub source: String,
    /// Labels go from 0 to `classes - 1`.
    pub classes: usize,
    /// Token data made from text (a folder of `.txt` files): how a model's samples decode to
    /// text.
    pub text: Option<std::sync::Arc<super::codec::TextCodec>>,
}

impl Dataset {
    /// A training and a test split as loaded: no validation split carved yet, nothing left out.
    pub fn of(train: Split, test: Split, source: String, classes: usize) -> Dataset {
        Dataset {
            train,
            test,
            val: None,
            test_is_val: false,
            skipped: Vec::new(),
            source,
            classes,
            text: None,
        }
    }

    /// Moves `fraction` of the training samples (at least one) into a validation split: the
    /// samples a permutation drawn from `seed` puts last, so the split is the same on every run
    /// and every rank with that seed; both keep the training set's order.
    pub fn carve_val(&mut self, fraction: f64, seed: u64) {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let n = self.train.len();
        let k = ((n as f64 * fraction).ceil() as usize).clamp(1, n.saturating_sub(1).max(1));
        let mut order: Vec<usize> = (0..n).collect();
        // A stream of its own: the run's shuffles use other derivations of the seed.
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7661_6c5f_7370_6c74));
        let mut val: Vec<usize> = order[n - k..].to_vec();
        let mut train: Vec<usize> = order[..n - k].to_vec();
        val.sort_unstable();
        train.sort_unstable();
        self.val = Some(self.train.select(&val));
        self.train = self.train.select(&train);
    }

    /// The split evaluated every epoch: the validation split when there is one, else the test set.
    pub fn evaluated(&self) -> &Split {
        self.val.as_ref().unwrap_or(&self.test)
    }

    /// Loads the data set at `path`, its format detected from what the folder or file holds.
    pub fn load(path: &Path) -> Result<Self, DataError> {
        Dataset::load_with(path, super::LoadOptions::default())
    }

    /// Loads the data set at `path` as `options` say (the format detected unless named), and
    /// checks that both splits hold samples of one shape.
    pub fn load_with(path: &Path, options: super::LoadOptions) -> Result<Self, DataError> {
        let format = match options.format {
            Some(f) => f,
            None => super::format::detect(path)?,
        };
        let data = super::format::load(format, path, options)?;
        if data.train.sample_shape() != data.test.sample_shape() {
            return Err(DataError::SplitShapes {
                path: path.to_owned(),
                train: data.train.sample_shape().to_vec(),
                test: data.test.sample_shape().to_vec(),
            });
        }
        Ok(data)
    }

    /// Per-channel mean and standard deviation of the training images on the `[0, 1]` scale
    /// (bytes / 255, floats as they are): the default normalization of the data sets that
    /// state none of their own.
    /// Streamed images are measured on 256 of them, evenly spaced over the training set.
    pub fn channel_stats(&self) -> (Vec<f64>, Vec<f64>) {
        const MEASURED: usize = 256;
        let n = self.train.len();
        let measured;
        let s = if self.train.images.is_streamed() {
            let picks: Vec<usize> = (0..MEASURED.min(n)).map(|k| k * n / MEASURED.min(n)).collect();
            measured = self.train.select(&picks).materialized();
            &measured
        } else {
            &self.train
        };
        let (plane, c) = (s.rows * s.cols, s.channels);
        let mut sum = vec![0.0f64; c];
        let mut sq = vec![0.0f64; c];
        let mut add = |i: usize, v: f64| {
            let ch = (i / plane) % c;
            sum[ch] += v;
            sq[ch] += v * v;
        };
        match &s.images {
            Pixels::Bytes(v) => v.iter().enumerate().for_each(|(i, &b)| add(i, f64::from(b) / 255.0)),
            Pixels::Floats(v) => v.iter().enumerate().for_each(|(i, &f)| add(i, f64::from(f))),
            Pixels::Streamed(_) | Pixels::Tokens(_) => {}
        }
        let n = (s.len() * plane).max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|x| x / n).collect();
        let std = sq.iter().zip(&mean).map(|(q, m)| (q / n - m * m).max(0.0).sqrt().max(1e-6)).collect();
        (mean, std)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validation_split_is_carved_the_same_way_for_a_seed() {
        let labels: Vec<i64> = (0..20).collect();
        let images: Vec<u8> = (0..20u8).flat_map(|i| [i; 4]).collect();
        let data = Dataset::of(
            Split::gray(images, labels, 2, 2),
            Split::gray(vec![0; 4], vec![0], 2, 2),
            String::new(),
            20,
        );
        let (mut a, mut b, mut c) = (data.clone(), data.clone(), data);
        a.carve_val(0.25, 7);
        b.carve_val(0.25, 7);
        c.carve_val(0.25, 8);
        let val = a.val.as_ref().unwrap();
        assert_eq!((a.train.len(), val.len()), (15, 5));
        assert_eq!(a, b, "the same seed, the same split");
        assert_ne!(a.val, c.val, "another seed, another split");
        // Every sample is in exactly one of the two, its pixels with its label.
        let mut all: Vec<i64> = a.train.labels.iter().chain(&val.labels).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
        let Pixels::Bytes(px) = &val.images else { panic!("bytes") };
        assert!(val.labels.iter().enumerate().all(|(k, l)| px[k * 4] as i64 == *l));
    }

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
