//! The image-classification data set held in host memory: Fashion-MNIST or MNIST from a folder.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::idx::{read_idx_file, IdxArray, IdxError};

/// Where the data is looked for when neither `--data` nor `$DPT_DATA` says.
pub const DEFAULT_DATA_DIR: &str = "/usr/share/datasets/fashion-mnist";
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
    LabelOutOfRange { path: PathBuf, index: usize, label: u8, max: u8 },
}

/// One split (train or test): `len` images of `rows`×`cols` bytes and their labels.
#[derive(Debug, Clone)]
pub struct Split {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
    pub rows: usize,
    pub cols: usize,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split holds no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Keeps the first `n` samples (all of them when `n` is larger).
    pub fn truncate(&mut self, n: usize) {
        let n = n.min(self.len());
        self.labels.truncate(n);
        self.images.truncate(n * self.rows * self.cols);
    }
}

/// The training and test splits of one data set.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub train: Split,
    pub test: Split,
}

impl Dataset {
    /// Loads `train-*` and `t10k-*` IDX files (gzip or raw) from `dir`.
    pub fn load(dir: &Path) -> Result<Self, DataError> {
        Ok(Dataset {
            train: load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte")?,
            test: load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")?,
        })
    }
}

fn locate(dir: &Path, file: &'static str) -> Result<PathBuf, DataError> {
    [format!("{file}.gz"), file.to_owned()]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| DataError::Missing { dir: dir.to_owned(), file })
}

fn load_split(dir: &Path, images: &'static str, labels: &'static str) -> Result<Split, DataError> {
    let images_path = locate(dir, images)?;
    let labels_path = locate(dir, labels)?;
    let img = read_idx_file(&images_path)?;
    let lab = read_idx_file(&labels_path)?;
    let split = split_from_arrays(img, &images_path, lab, &labels_path)?;
    if (split.rows, split.cols) != (IMAGE_SIDE, IMAGE_SIDE) {
        return Err(DataError::ImageSize { path: images_path, rows: split.rows, cols: split.cols });
    }
    Ok(split)
}

/// Checks shapes, counts and label range of decoded image and label arrays.
pub fn split_from_arrays(
    img: IdxArray,
    images_path: &Path,
    lab: IdxArray,
    labels_path: &Path,
) -> Result<Split, DataError> {
    if img.dims.len() != 3 || img.dims[1] == 0 || img.dims[2] == 0 {
        return Err(IdxError::BadShape {
            path: images_path.to_owned(),
            found: img.dims,
            expected: "[count, rows, cols]",
        }
        .into());
    }
    if lab.dims.len() != 1 {
        return Err(IdxError::BadShape {
            path: labels_path.to_owned(),
            found: lab.dims,
            expected: "[count]",
        }
        .into());
    }
    let (n_images, n_labels) = (img.dims[0] as usize, lab.dims[0] as usize);
    if n_images != n_labels {
        return Err(DataError::CountMismatch {
            images: images_path.to_owned(),
            n_images,
            labels: labels_path.to_owned(),
            n_labels,
        });
    }
    if let Some((index, &label)) = lab.data.iter().enumerate().find(|(_, &l)| l >= NUM_CLASSES) {
        return Err(DataError::LabelOutOfRange {
            path: labels_path.to_owned(),
            index,
            label,
            max: NUM_CLASSES,
        });
    }
    Ok(Split { images: img.data, labels: lab.data, rows: img.dims[1] as usize, cols: img.dims[2] as usize })
}
