//! The four IDX files of MNIST or Fashion-MNIST (`train-images-idx3-ubyte[.gz]` …) into a data
//! set: the arrays read by `idx.rs`, their shapes, counts and labels checked. Uncompressed image
//! files can stay in place when streamed (each image read from its row); gzip files are read
//! whole.

use std::path::{Path, PathBuf};

use super::dataset::{DataError, Dataset, Split, IMAGE_SIDE, NUM_CLASSES};
use super::format::LoadOptions;
use super::idx::{header_in_place, read_idx_file, IdxArray, IdxError};
use super::stream::{RowSplit, Rows};

const SPLITS: [(&str, &str); 2] = [
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
];

/// Loads `train-*` and `t10k-*` IDX files (gzip or raw) from `dir`: read into memory, or the
/// images left in their files when both are uncompressed and `options` stream them.
pub fn load(dir: &Path, options: LoadOptions) -> Result<Dataset, DataError> {
    let [train, test] =
        SPLITS.map(|(images, labels)| Ok::<_, DataError>((locate(dir, images)?, locate(dir, labels)?)));
    let ((train_images, train_labels), (test_images, test_labels)) = (train?, test?);
    let in_place = match (header_in_place(&train_images)?, header_in_place(&test_images)?) {
        (Some(a), Some(b)) => {
            let decoded: u64 =
                [&a.0, &b.0].iter().map(|d| d.iter().map(|&x| u64::from(x)).product::<u64>()).sum();
            options.loader.streams(decoded, options.memory).then_some((a, b))
        }
        _ => None,
    };
    let (train, test, streamed) = match in_place {
        Some((train_header, test_header)) => {
            let mut rows = Rows::default();
            let mut stream = |images: &Path, (dims, data_at): (Vec<u32>, u64), labels: &Path| {
                let (labels, rows_, cols) = checked(&dims, images, read_idx_file(labels)?, labels)?;
                let per = (rows_ * cols) as u64;
                let entries = rows.entries(images, (data_at, per), per as u32, labels.len());
                Ok::<_, DataError>(RowSplit {
                    entries,
                    labels,
                    shape: (1, rows_, cols),
                    channels_last: false,
                })
            };
            let train = stream(&train_images, train_header, &train_labels)?;
            let test = stream(&test_images, test_header, &test_labels)?;
            let [train, test] = rows.splits([train, test]);
            (train, test, true)
        }
        None => {
            let read = |images: &Path, labels: &Path| {
                let img = read_idx_file(images)?;
                let (labels, rows, cols) = checked(&img.dims, images, read_idx_file(labels)?, labels)?;
                Ok::<_, DataError>(Split::gray(img.data, labels, rows, cols))
            };
            (read(&train_images, &train_labels)?, read(&test_images, &test_labels)?, false)
        }
    };
    let source = format!("IDX files in {}{}", dir.display(), if streamed { " (streamed)" } else { "" });
    Ok(Dataset::of(train, test, source, NUM_CLASSES as usize))
}

fn locate(dir: &Path, file: &'static str) -> Result<PathBuf, DataError> {
    [format!("{file}.gz"), file.to_owned()]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| DataError::Missing { dir: dir.to_owned(), file })
}

/// Checks the images' shape (`[count, 28, 28]`) against the labels' (`[count]`, each below the
/// class count): the labels and the images' rows and columns.
fn checked(
    dims: &[u32],
    images_path: &Path,
    lab: IdxArray,
    labels_path: &Path,
) -> Result<(Vec<i64>, usize, usize), DataError> {
    if dims.len() != 3 || dims[1] == 0 || dims[2] == 0 {
        return Err(IdxError::BadShape {
            path: images_path.to_owned(),
            found: dims.to_vec(),
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
    let (n_images, n_labels) = (dims[0] as usize, lab.dims[0] as usize);
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
    let (rows, cols) = (dims[1] as usize, dims[2] as usize);
    if (rows, cols) != (IMAGE_SIDE, IMAGE_SIDE) {
        return Err(DataError::ImageSize { path: images_path.to_owned(), rows, cols });
    }
    Ok((lab.data.iter().map(|&l| i64::from(l)).collect(), rows, cols))
}
