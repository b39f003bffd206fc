//! The four IDX files of MNIST or Fashion-MNIST (`train-images-idx3-ubyte[.gz]` …) into a data
//! set: the arrays read by `idx.rs`, their shapes, counts and labels checked.

use std::path::{Path, PathBuf};

use super::dataset::{DataError, Dataset, Split, IMAGE_SIDE, NUM_CLASSES};
use super::idx::{read_idx_file, IdxArray, IdxError};

/// Loads `train-*` and `t10k-*` IDX files (gzip or raw) from `dir`.
pub fn load(dir: &Path) -> Result<Dataset, DataError> {
    Ok(Dataset {
        train: load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte")?,
        test: load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")?,
        val: None,
        test_is_val: false,
        skipped: Vec::new(),
        source: format!("IDX files in {}", dir.display()),
        classes: NUM_CLASSES as usize,
    })
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
            label: i64::from(label),
            max: i64::from(NUM_CLASSES),
        });
    }
    let labels = lab.data.iter().map(|&l| i64::from(l)).collect();
    Ok(Split::gray(img.data, labels, img.dims[1] as usize, img.dims[2] as usize))
}
