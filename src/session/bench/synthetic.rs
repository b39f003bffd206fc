//! The bench's data, when none is given: random images of Fashion-MNIST's shape (28×28, ten
//! classes) as the four IDX files both sides read, and random token ids as nanoGPT's
//! `train.bin`/`val.bin`. Throughput does not depend on what the pixels show.

use std::io::Write;
use std::path::Path;

/// Training images: enough for every case's steps in one epoch (no evaluation in the middle).
pub const TRAIN_IMAGES: usize = 60_000;
/// Test images: the runs never reach an epoch's end, so few are needed.
const TEST_IMAGES: usize = 1_000;
/// Tokens of `train.bin`: windows are drawn at random offsets, so the file need not be large.
const TRAIN_TOKENS: usize = 2_000_000;
const VAL_TOKENS: usize = 100_000;

/// A fixed stream of bytes (a 64-bit LCG's high bits), the same on every machine.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
}

fn idx(path: &Path, magic: u32, dims: &[u32], body: &[u8]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(&magic.to_be_bytes())?;
    for d in dims {
        f.write_all(&d.to_be_bytes())?;
    }
    f.write_all(body)?;
    f.flush()
}

/// Writes the four IDX files of random 28×28 images into `dir`, `train` of them for training.
pub fn images(dir: &Path, train: usize) -> std::io::Result<()> {
    let mut s = Stream(7);
    for (prefix, n) in [("train", train), ("t10k", TEST_IMAGES)] {
        let pixels: Vec<u8> = (0..n * 784).map(|_| s.next() as u8).collect();
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        idx(&dir.join(format!("{prefix}-images-idx3-ubyte")), 0x0803, &[n as u32, 28, 28], &pixels)?;
        idx(&dir.join(format!("{prefix}-labels-idx1-ubyte")), 0x0801, &[n as u32], &labels)?;
    }
    Ok(())
}

/// Writes `train.bin` and `val.bin` of random u16 token ids below `vocab` into `dir`.
pub fn tokens(dir: &Path, vocab: usize) -> std::io::Result<()> {
    let mut s = Stream(11);
    for (name, n) in [("train.bin", TRAIN_TOKENS), ("val.bin", VAL_TOKENS)] {
        let bytes: Vec<u8> =
            (0..n).flat_map(|_| ((s.next() as usize % vocab) as u16).to_le_bytes()).collect();
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_images_read_back_as_a_data_set_and_the_tokens_stay_below_the_vocabulary() {
        let dir = tempfile::tempdir().expect("temp");
        images(dir.path(), TRAIN_IMAGES).expect("images");
        let set = dpt_tui::data::Dataset::load(dir.path()).expect("an IDX set");
        assert_eq!((set.train.len(), set.test.len(), set.classes), (TRAIN_IMAGES, TEST_IMAGES, 10));
        tokens(dir.path(), 300).expect("tokens");
        let train = std::fs::read(dir.path().join("train.bin")).expect("train.bin");
        assert_eq!(train.len(), 2 * TRAIN_TOKENS);
        assert!(train.chunks(2).all(|c| u16::from_le_bytes([c[0], c[1]]) < 300));
    }
}
