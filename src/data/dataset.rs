//! The image-classification data set held in host memory, whatever format it came in (see
//! `format`): splits of same-shaped images with integer labels.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::idx::IdxError;
pub use super::split::{Pixels, Split};

pub use dpt_core::data::DEFAULT_DATA_DIR;
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
}
