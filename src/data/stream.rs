//! A data set read from storage while it trains (`--loader stream`): the index of where each
//! sample's encoded bytes lie (a file, or a member of a tar shard), kept compact so a folder of
//! millions of images costs tens of bytes per sample, and the decoding of one sample into its
//! slot of a batch. The pixels are never all in memory; the loader (`input::loader`) decodes
//! the samples of each batch as training reaches them.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fast_image_resize as fir;
use image::DynamicImage;

use super::dataset::{Pixels, Split};

/// Why a stored sample cannot become the network's input (said after the sample's name).
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("{0}")]
    Decode(#[from] image::ImageError),
    #[error("holds {found} bytes where a sample has {expected}")]
    Length { found: usize, expected: usize },
    #[error(
        "is {found_h}x{found_w}, not {h}x{w} as the first image; pass --image-size H,W to resize every image"
    )]
    Size { found_h: u32, found_w: u32, h: u32, w: u32 },
    #[error("cannot be cut and resized: {0}")]
    Buffer(#[from] fir::ImageBufferError),
    #[error("cannot be cut and resized: {0}")]
    Resize(#[from] fir::ResizeError),
    #[error("the decoder failed: {0}")]
    DecoderPanicked(String),
}
use super::folder::{ImageSource, Labelled};

/// Every file or shard path of a data set, in one string (paths are the bulk of an index).
#[derive(Debug, Default, PartialEq)]
pub struct Names {
    text: String,
    ends: Vec<usize>,
}

impl Names {
    /// Adds `path`; returns its number.
    pub fn push(&mut self, path: &Path) -> u32 {
        self.text.push_str(&path.to_string_lossy());
        self.ends.push(self.text.len());
        (self.ends.len() - 1) as u32
    }

    /// Path number `i`.
    pub fn get(&self, i: u32) -> &str {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

/// Where one sample's encoded image is: a whole file, or `len` bytes at `offset` of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub name: u32,
    pub offset: u64,
    /// `None`: the whole file.
    pub len: Option<u32>,
    /// A tar member's own name within its shard (for messages), as an index into `Names`.
    pub member: Option<u32>,
}

/// A split's samples as stored: the shared path table and one entry per sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Streamed {
    pub names: Arc<Names>,
    pub entries: Vec<Entry>,
    /// Images of another size than the split's are resized (`--image-size`), not refused.
    pub resize: bool,
    /// The entries are the samples' own bytes (a uint8 array's rows), not encoded images:
    /// `Some(true)` when they are channels-last (`[H, W, C]`), `Some(false)` when planar.
    pub raw: Option<bool>,
}

/// How a decoded image becomes a sample of the split's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fit {
    /// Resized to the split's size (`--image-size`), or refused when it is another size.
    Whole { resize: bool },
    /// `RandomResizedCrop`: the region `(top, left, height, width)` resized to the split's size.
    Region { top: u32, left: u32, height: u32, width: u32 },
    /// Evaluation: the shorter side resized to `side`, then a centre crop of the split's size
    /// (torchvision's `Resize(side)` + `CenterCrop(size)`).
    ResizeCenter { side: u32 },
}

impl Streamed {
    /// Sample `i`'s name in messages: its file, or `shard.tar/member`.
    pub fn name(&self, i: usize) -> PathBuf {
        let e = self.entries[i];
        let base = PathBuf::from(self.names.get(e.name));
        match e.member {
            Some(m) => base.join(self.names.get(m)),
            None => base,
        }
    }

    /// Sample `i`'s encoded bytes.
    pub fn read(&self, i: usize) -> std::io::Result<Vec<u8>> {
        let e = self.entries[i];
        let path = self.names.get(e.name);
        match e.len {
            None => std::fs::read(path),
            Some(len) => read_range(Path::new(path), e.offset, len),
        }
    }

    /// Sample `i` decoded (its size, whether it is in color).
    pub fn decode(&self, i: usize) -> Result<DynamicImage, SampleError> {
        decode_bytes(&self.read(i)?)
    }

    /// Sample `i` as `[channels, height, width]` planar bytes in `out`: an array's row copied
    /// (channels-last rows made planar), an image decoded and fitted as `fit` says for its
    /// `(height, width)`.
    pub fn sample_into(
        &self,
        i: usize,
        shape: (usize, u32, u32),
        fit: impl FnOnce((u32, u32)) -> Fit,
        out: &mut [u8],
    ) -> Result<(), SampleError> {
        let Some(channels_last) = self.raw else {
            let img = self.decode(i)?;
            let fit = fit((img.height(), img.width()));
            return fit_into(img, shape, fit, out);
        };
        let bytes = self.read(i)?;
        let (c, plane) = (shape.0, (shape.1 * shape.2) as usize);
        if bytes.len() != c * plane {
            return Err(SampleError::Length { found: bytes.len(), expected: c * plane });
        }
        if channels_last && c > 1 {
            for (p, px) in bytes.chunks_exact(c).enumerate() {
                for (ch, &v) in px.iter().enumerate() {
                    out[ch * plane + p] = v;
                }
            }
        } else {
            out[..bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// The split's samples decoded into memory (`[n, C, H, W]` bytes and their labels), those
    /// that do not decode left out: for the few samples a check needs, never a whole data set.
    pub fn decode_split(&self, split: &Split) -> Split {
        let (c, h, w) = (split.channels, split.rows as u32, split.cols as u32);
        let per = split.sample_len();
        let mut images = Vec::with_capacity(self.entries.len() * per);
        let mut labels = Vec::with_capacity(self.entries.len());
        let mut slot = vec![0u8; per];
        for (i, &label) in split.labels.iter().enumerate() {
            if self.sample_into(i, (c, h, w), |_| Fit::Whole { resize: true }, &mut slot).is_ok() {
                images.extend_from_slice(&slot);
                labels.push(label);
            }
        }
        Split { images: Pixels::Bytes(images), labels, targets: split.targets.clone(), ..*split }
    }

    /// The samples at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Streamed {
        Streamed {
            names: Arc::clone(&self.names),
            entries: indices.iter().map(|&i| self.entries[i]).collect(),
            resize: self.resize,
            raw: self.raw,
        }
    }
}

/// Splits whose samples are rows of raw bytes in files (uint8 arrays, CIFAR-10 records, IDX
/// images), left there: every file's path once, each sample's row by its offset.
#[derive(Default)]
pub(super) struct Rows {
    names: Names,
}

impl Rows {
    /// The `n` rows of `len` bytes in `path`, the first at byte `first`, one every `stride`.
    pub fn entries(&mut self, path: &Path, (first, stride): (u64, u64), len: u32, n: usize) -> Vec<Entry> {
        let name = self.names.push(path);
        (0..n as u64)
            .map(|i| Entry { name, offset: first + i * stride, len: Some(len), member: None })
            .collect()
    }

    /// The splits, over one shared path table.
    pub fn splits<const N: usize>(self, splits: [RowSplit; N]) -> [Split; N] {
        let names = Arc::new(self.names);
        splits.map(|RowSplit { entries, labels, shape: (channels, rows, cols), channels_last }| Split {
            images: Pixels::Streamed(Streamed {
                names: Arc::clone(&names),
                entries,
                resize: false,
                raw: Some(channels_last),
            }),
            labels,
            channels,
            rows,
            cols,
            targets: None,
        })
    }
}

/// One split's rows: where each sample is, its label, the sample's `(channels, rows, cols)`, and
/// whether the rows are channels-last.
pub(super) struct RowSplit {
    pub entries: Vec<Entry>,
    pub labels: Vec<i64>,
    pub shape: (usize, usize, usize),
    pub channels_last: bool,
}

/// The splits listed by an image folder or shards, left on storage: `(channels, height,
/// width)` each sample decodes to, `resize` whether images of another size are resized.
pub(super) fn index(
    (train, test, val): (Labelled, Labelled, Option<Labelled>),
    (channels, rows, cols): (usize, usize, usize),
    resize: bool,
) -> (Split, Split, Option<Split>) {
    let mut names = Names::default();
    let mut shards: HashMap<PathBuf, u32> = HashMap::new();
    let mut entries = |list: Labelled| -> (Vec<Entry>, Vec<i64>) {
        list.into_iter()
            .map(|(source, label)| {
                let entry = match source {
                    ImageSource::File(p) => {
                        Entry { name: names.push(&p), offset: 0, len: None, member: None }
                    }
                    ImageSource::Member { shard, member, offset, len } => {
                        let name = *shards.entry(shard).or_insert_with_key(|s| names.push(s));
                        let member = Some(names.push(Path::new(&member)));
                        Entry { name, offset, len: Some(len), member }
                    }
                };
                (entry, label)
            })
            .unzip()
    };
    let lists = [Some(train), Some(test), val].map(|l| l.map(&mut entries));
    let names = Arc::new(names);
    let [train, test, val] = lists.map(|l| {
        l.map(|(entries, labels)| Split {
            images: Pixels::Streamed(Streamed { names: Arc::clone(&names), entries, resize, raw: None }),
            labels,
            channels,
            rows,
            cols,
            targets: None,
        })
    });
    let empty = || Split {
        images: Pixels::Bytes(Vec::new()),
        labels: Vec::new(),
        channels,
        rows,
        cols,
        targets: None,
    };
    (train.unwrap_or_else(empty), test.unwrap_or_else(empty), val)
}

/// `len` bytes at `offset` of the file at `path` (a tar shard's member).
pub fn read_range(path: &Path, offset: u64, len: u32) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0; len as usize];
    std::fs::File::open(path)?.read_exact_at(&mut bytes, offset)?;
    Ok(bytes)
}

/// Encoded bytes (PNG or JPEG, told by their content) to an image.
pub fn decode_bytes(bytes: &[u8]) -> Result<DynamicImage, SampleError> {
    Ok(image::ImageReader::new(std::io::Cursor::new(bytes)).with_guessed_format()?.decode()?)
}

/// Writes `img`, fitted to `[channels, height, width]` as `fit` says, into `out` (planar bytes,
/// `channels` 1: its luma; 3: RGB). A wrong size without resizing is an error in words.
pub fn fit_into(
    img: DynamicImage,
    (channels, height, width): (usize, u32, u32),
    fit: Fit,
    out: &mut [u8],
) -> Result<(), SampleError> {
    let (ih, iw) = (img.height(), img.width());
    // The source region and the size it is resized to (before a centre crop, for evaluation).
    let (region, to) = match fit {
        Fit::Whole { .. } if (ih, iw) == (height, width) => ((0, 0, ih, iw), (height, width)),
        Fit::Whole { resize: true } => ((0, 0, ih, iw), (height, width)),
        Fit::Whole { resize: false } => {
            return Err(SampleError::Size { found_h: ih, found_w: iw, h: height, w: width })
        }
        Fit::Region { top, left, height: h, width: w } => ((top, left, h, w), (height, width)),
        // torchvision's Resize(int): the shorter side to `side`, the longer in proportion
        // (truncated).
        Fit::ResizeCenter { side } if ih <= iw => {
            ((0, 0, ih, iw), (side, (u64::from(side) * u64::from(iw) / u64::from(ih).max(1)) as u32))
        }
        Fit::ResizeCenter { side } => {
            ((0, 0, ih, iw), ((u64::from(side) * u64::from(ih) / u64::from(iw).max(1)) as u32, side))
        }
    };
    // CenterCrop's offsets, rounded as Python rounds (half to even); none elsewhere.
    let centre =
        |big: u32, small: u32| ((f64::from(big) - f64::from(small)) / 2.0).round_ties_even().max(0.0) as u32;
    let (top, left) = (centre(to.0, height), centre(to.1, width));
    let (pixels, kind) = match channels {
        1 => (img.into_luma8().into_raw(), fir::PixelType::U8),
        _ => (img.into_rgb8().into_raw(), fir::PixelType::U8x3),
    };
    let resized = resize(&pixels, kind, (ih, iw), region, to)?;
    let (plane, stride) = ((height * width) as usize, to.1 as usize);
    for y in 0..height as usize {
        let row = &resized[((top as usize + y) * stride + left as usize) * channels..];
        for x in 0..width as usize {
            for c in 0..channels {
                out[c * plane + y * width as usize + x] = row[x * channels + c];
            }
        }
    }
    Ok(())
}

/// `pixels` (interleaved, `(height, width)`) cut to `region` `(top, left, h, w)` and resized to
/// `to` `(height, width)` with a bilinear filter widened when shrinking (PIL's antialiased
/// bilinear; `fast_image_resize`'s SIMD convolution); the same size is a copy.
fn resize(
    pixels: &[u8],
    kind: fir::PixelType,
    (height, width): (u32, u32),
    (top, left, h, w): (u32, u32, u32, u32),
    to: (u32, u32),
) -> Result<Vec<u8>, SampleError> {
    if (top, left, h, w) == (0, 0, height, width) && to == (height, width) {
        return Ok(pixels.to_vec());
    }
    let src = fir::images::ImageRef::new(width, height, pixels, kind)?;
    let mut dst = fir::images::Image::new(to.1, to.0, kind);
    let options = fir::ResizeOptions::new()
        .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Bilinear))
        .crop(f64::from(left), f64::from(top), f64::from(w), f64::from(h));
    fir::Resizer::new().resize(&src, &mut dst, &options)?;
    Ok(dst.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_every_path_in_one_string() {
        let mut names = Names::default();
        let a = names.push(Path::new("/data/train/cat/1.jpg"));
        let b = names.push(Path::new("/data/train/dog/22.png"));
        assert_eq!((names.get(a), names.get(b)), ("/data/train/cat/1.jpg", "/data/train/dog/22.png"));
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn a_centre_crop_after_a_shorter_side_resize_is_the_middle() {
        // A 4x8 image whose columns count up; Resize(2) makes it 2x4, CenterCrop(2) its middle.
        let img = image::RgbImage::from_fn(8, 4, |x, _| image::Rgb([x as u8 * 10, 0, 0]));
        let mut out = vec![0u8; 3 * 4];
        fit_into(DynamicImage::ImageRgb8(img), (3, 2, 2), Fit::ResizeCenter { side: 2 }, &mut out).unwrap();
        assert!(out[0] < out[1] && out[1] > 20 && out[1] < 60, "{out:?}");
        let gray = image::GrayImage::from_pixel(3, 3, image::Luma([7]));
        let mut one = vec![0u8; 9];
        fit_into(DynamicImage::ImageLuma8(gray.clone()), (1, 3, 3), Fit::Whole { resize: false }, &mut one)
            .unwrap();
        assert_eq!(one, vec![7; 9]);
        let wrong =
            fit_into(DynamicImage::ImageLuma8(gray), (1, 2, 2), Fit::Whole { resize: false }, &mut one);
        assert!(wrong.unwrap_err().to_string().contains("--image-size"));
    }
}
