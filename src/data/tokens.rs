//! Token data in nanoGPT's layout: a folder with `train.bin` and `val.bin`, each a flat run of
//! little-endian token ids (uint16 or uint32). A sample is a window of `T + 1` tokens at an
//! offset drawn uniformly from `[0, len - T - 1]`: its inputs the first `T`, its targets the
//! last `T`. The offset of window `i` is a pure function of (seed, split, `i`), so a resumed or
//! requeued run reads the same windows, and each replica reads only its own. The files are read
//! window by window where they lie (a positioned read each), never loaded: a file larger than
//! memory trains as a small one does.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, SeedableRng};

use super::dataset::{DataError, Dataset, Pixels, Split};
pub use dpt_core::data::TokenDtype;
use dpt_core::seed::mix_seed;

/// One token file, opened for positioned reads.
#[derive(Debug)]
pub struct TokenFile {
    pub path: PathBuf,
    file: File,
    pub dtype: TokenDtype,
    /// Tokens the file holds.
    pub tokens: u64,
}

impl TokenFile {
    /// Opens `path`, whose length must be a whole number of tokens.
    pub fn open(path: &Path, dtype: TokenDtype) -> Result<TokenFile, DataError> {
        let read = |why: String| DataError::Read { path: path.to_owned(), why };
        let file = File::open(path).map_err(|e| read(e.to_string()))?;
        let bytes = file.metadata().map_err(|e| read(e.to_string()))?.len();
        let width = dtype.bytes() as u64;
        if bytes % width != 0 {
            return Err(DataError::TokenLength { path: path.to_owned(), bytes, dtype: dtype.name() });
        }
        Ok(TokenFile { path: path.to_owned(), file, dtype, tokens: bytes / width })
    }

    /// Tokens `at..at + n`.
    pub fn read(&self, at: u64, n: usize) -> Result<Vec<i64>, DataError> {
        Ok(self.ids(at, n, &mut Vec::new())?.map(i64::from).collect())
    }

    /// The ids of tokens `at..at + n`, read through `bytes` (a buffer to reuse between calls).
    pub fn ids<'b>(
        &self,
        at: u64,
        n: usize,
        bytes: &'b mut Vec<u8>,
    ) -> Result<impl Iterator<Item = u32> + Clone + 'b, DataError> {
        let (dtype, width) = (self.dtype, self.dtype.bytes());
        bytes.resize(n * width, 0);
        self.file
            .read_exact_at(bytes, at * width as u64)
            .map_err(|e| DataError::Read { path: self.path.clone(), why: e.to_string() })?;
        Ok(bytes.chunks_exact(width).map(move |b| match dtype {
            TokenDtype::U16 => u32::from(u16::from_le_bytes([b[0], b[1]])),
            TokenDtype::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        }))
    }
}

/// A split of token data: `count` windows of `block + 1` tokens of one file.
#[derive(Debug, Clone)]
pub struct TokenWindows {
    pub file: Arc<TokenFile>,
    pub block: usize,
    /// Windows in the split: per evaluation period for training, the fixed evaluated set else.
    pub count: usize,
    /// The stream the offsets are drawn from (the run's seed, apart per split).
    pub seed: u64,
}

impl PartialEq for TokenWindows {
    fn eq(&self, other: &Self) -> bool {
        (&self.file.path, self.block, self.count, self.seed)
            == (&other.file.path, other.block, other.count, other.seed)
    }
}

/// Keeps the training and validation offsets' streams apart.
const TRAIN_STREAM: u64 = 0x746f_6b5f_7472_6169;
const VAL_STREAM: u64 = 0x746f_6b5f_7661_6c73;

impl TokenWindows {
    /// The offset of window `index`: uniform over `[0, len - T - 1]`.
    pub fn offset(&self, index: u64) -> u64 {
        let last = self.file.tokens - self.block as u64 - 1;
        rand_chacha::ChaCha8Rng::seed_from_u64(mix_seed(self.seed, index)).random_range(0..=last)
    }

    /// Windows `indices` as inputs and targets, `n × T` token ids each, row after row.
    pub fn read(&self, indices: impl Iterator<Item = u64>) -> Result<(Vec<i64>, Vec<i64>), DataError> {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for i in indices {
            let w = self.file.read(self.offset(i), self.block + 1)?;
            x.extend_from_slice(&w[..self.block]);
            y.extend_from_slice(&w[1..]);
        }
        Ok((x, y))
    }
}

/// How token data is cut into windows: its token width, the block, the windows of a training
/// period and of the evaluated set, and the run's seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLayout {
    pub dtype: TokenDtype,
    pub block: usize,
    pub train_windows: usize,
    pub val_windows: usize,
    pub seed: u64,
}

/// Whether `dir` holds token data.
pub fn detect(dir: &Path) -> bool {
    dir.join("train.bin").is_file() && dir.join("val.bin").is_file()
}

/// Opens `dir`'s `train.bin` and `val.bin` as `layout` cuts them.
pub fn load(dir: &Path, layout: Option<TokenLayout>) -> Result<Dataset, DataError> {
    let layout = layout.ok_or(DataError::NoBlockSize { dir: dir.to_owned() })?;
    let split = |name: &str, count: usize, stream: u64| -> Result<Split, DataError> {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(DataError::TokensMissing { dir: dir.to_owned(), file: name.to_owned() });
        }
        let file = TokenFile::open(&path, layout.dtype)?;
        if file.tokens < layout.block as u64 + 1 {
            return Err(DataError::BlockTooLong { path, tokens: file.tokens, block: layout.block });
        }
        let seed = mix_seed(layout.seed, stream);
        let windows = TokenWindows { file: Arc::new(file), block: layout.block, count, seed };
        Ok(Split {
            images: Pixels::Tokens(windows),
            labels: Vec::new(),
            channels: 1,
            rows: 1,
            cols: layout.block,
            targets: None,
        })
    };
    let train = split("train.bin", layout.train_windows, TRAIN_STREAM)?;
    let test = split("val.bin", layout.val_windows, VAL_STREAM)?;
    let tokens = |s: &Split| match &s.images {
        Pixels::Tokens(w) => w.file.tokens,
        _ => 0,
    };
    let source = format!(
        "tokens in {} ({}: {} train, {} val), windows of {}",
        dir.display(),
        layout.dtype.name(),
        tokens(&train),
        tokens(&test),
        layout.block
    );
    let mut data = Dataset::of(train, test, source, 0);
    data.test_is_val = true;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, tokens: &[u16]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, tokens.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        path
    }

    #[test]
    fn windows_are_a_pure_function_of_the_seed_and_cover_every_offset() {
        let dir = tempfile::tempdir().unwrap();
        let tokens: Vec<u16> = (0..40).collect();
        let f = Arc::new(TokenFile::open(&file(dir.path(), "t.bin", &tokens), TokenDtype::U16).unwrap());
        let w = TokenWindows { file: Arc::clone(&f), block: 8, count: 100, seed: 3 };
        let (x, y) = w.read([5u64, 6].into_iter()).unwrap();
        assert_eq!((x.len(), y.len()), (16, 16));
        // Targets are the inputs one token later: the file counts up.
        assert!(x.iter().zip(&y).all(|(a, b)| b - a == 1));
        assert_eq!(w.read([5u64, 6].into_iter()).unwrap().0, x, "the same windows again");
        let offsets: std::collections::BTreeSet<u64> = (0..2000).map(|i| w.offset(i)).collect();
        assert_eq!(offsets, (0..=31).collect(), "uniform over [0, len - T - 1]");
        let other = TokenWindows { seed: 4, ..w.clone() };
        assert_ne!(
            (0..20).map(|i| w.offset(i)).collect::<Vec<_>>(),
            (0..20).map(|i| other.offset(i)).collect::<Vec<_>>()
        );
        // A file of exactly T + 1 tokens has the one window.
        let one = TokenWindows { block: 39, ..w };
        assert!((0..50).all(|i| one.offset(i) == 0));
    }

    #[test]
    fn a_file_of_part_tokens_and_a_block_longer_than_the_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("odd.bin"), [1u8, 2, 3]).unwrap();
        let e = TokenFile::open(&dir.path().join("odd.bin"), TokenDtype::U16).unwrap_err();
        assert!(e.to_string().contains("3 bytes is not a whole number of u16 tokens"), "{e}");
        file(dir.path(), "train.bin", &[1; 10]);
        file(dir.path(), "val.bin", &[1; 4]);
        let layout =
            TokenLayout { dtype: TokenDtype::U16, block: 4, train_windows: 8, val_windows: 8, seed: 0 };
        let e = load(dir.path(), Some(layout)).unwrap_err();
        assert!(e.to_string().contains("val.bin holds 4 tokens"), "{e}");
        let data = load(dir.path(), Some(TokenLayout { block: 3, ..layout })).unwrap();
        assert_eq!((data.train.len(), data.test.len()), (8, 8));
    }
}
