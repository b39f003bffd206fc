//! The IDX reader on the shipped files and on every kind of corrupt file.

use crate::common;

use std::io::Write;
use std::path::Path;

use dpt_tui::data::idx::{encode_idx, parse_idx, read_idx_file};
use dpt_tui::data::{DataError, Dataset, IdxError};
use flate2::write::GzEncoder;

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Writes a data folder with `n_img` images and the given labels.
fn write_set(dir: &Path, n_img: u32, labels: &[u8]) {
    let images = encode_idx(&[n_img, 28, 28], &vec![7u8; n_img as usize * 784]);
    let labels_file = encode_idx(&[labels.len() as u32], labels);
    for prefix in ["train", "t10k"] {
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte.gz")), gz(&images)).unwrap();
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), &labels_file).unwrap();
    }
}

#[test]
fn reads_the_shipped_subset() {
    let data = Dataset::load(&common::subset_dir()).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (2000, 500));
    assert_eq!((data.train.rows, data.train.cols), (28, 28));
    assert_eq!(data.train.images.len(), 2000 * 784);
    assert_eq!(data.train.sample_shape(), [1, 28, 28]);
    // Fashion-MNIST's first training label is 9 (ankle boot); all ten classes occur.
    assert_eq!(data.train.labels[0], 9);
    let mut seen = [false; 10];
    data.train.labels.iter().for_each(|&l| seen[l as usize] = true);
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn raw_and_gzip_files_decode_the_same() {
    let bytes = encode_idx(&[2, 2, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let dir = tempfile::tempdir().unwrap();
    let (raw, zipped) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&raw, &bytes).unwrap();
    std::fs::write(&zipped, gz(&bytes)).unwrap();
    let a = read_idx_file(&raw).unwrap();
    assert_eq!(a, read_idx_file(&zipped).unwrap());
    assert_eq!(a.dims, vec![2, 2, 3]);
    assert_eq!(a.data[11], 12);
}

#[test]
fn bad_magic_is_reported() {
    let mut bytes = encode_idx(&[1], &[3]);
    bytes[2] = 0x0D; // float data: not ours
    let err = parse_idx(&bytes, Path::new("f")).unwrap_err();
    assert!(matches!(err, IdxError::BadMagic { found: 0x0000_0D01, .. }), "{err}");
    let err = parse_idx(b"PK\x03\x04rest", Path::new("f")).unwrap_err();
    assert!(err.to_string().contains("not an IDX file"), "{err}");
}

#[test]
fn truncated_data_and_headers_are_reported() {
    let bytes = encode_idx(&[3, 28, 28], &vec![0u8; 3 * 784]);
    let err = parse_idx(&bytes[..bytes.len() - 10], Path::new("f")).unwrap_err();
    assert!(matches!(err, IdxError::Truncated { expected: 2352, found: 2342, .. }), "{err}");
    let err = parse_idx(&bytes[..9], Path::new("f")).unwrap_err();
    assert!(matches!(err, IdxError::Truncated { .. }), "{err}");
    let err = parse_idx(&[0, 0], Path::new("f")).unwrap_err();
    assert!(matches!(err, IdxError::Truncated { .. }), "{err}");
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(parse_idx(&longer, Path::new("f")), Err(IdxError::TrailingBytes { found: 1, .. })));
}

#[test]
fn a_huge_announced_size_does_not_allocate() {
    let bytes = encode_idx(&[u32::MAX, u32::MAX, u32::MAX], &[1, 2, 3]);
    assert!(matches!(parse_idx(&bytes, Path::new("f")), Err(IdxError::Truncated { .. })));
}

#[test]
fn corrupt_and_truncated_gzip_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let zipped = gz(&encode_idx(&[100, 28, 28], &vec![5u8; 78_400]));
    let cut = dir.path().join("cut.gz");
    std::fs::write(&cut, &zipped[..zipped.len() / 2]).unwrap();
    let err = read_idx_file(&cut).unwrap_err();
    assert!(matches!(err, IdxError::Gzip { .. }), "{err}");
    let mut flipped = zipped.clone();
    flipped[20] ^= 0xFF;
    flipped[21] ^= 0xFF;
    let bad = dir.path().join("bad.gz");
    std::fs::write(&bad, &flipped).unwrap();
    assert!(read_idx_file(&bad).is_err());
}

#[test]
fn image_and_label_counts_must_match() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path(), 3, &[1, 2]);
    let err = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(err, DataError::CountMismatch { n_images: 3, n_labels: 2, .. }), "{err}");
}

#[test]
fn labels_must_be_classes() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path(), 3, &[1, 10, 2]);
    let err = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(err, DataError::LabelOutOfRange { index: 1, label: 10, .. }), "{err}");
}

#[test]
fn swapped_files_are_a_shape_error() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path(), 2, &[1, 2]);
    let labels = encode_idx(&[2], &[1, 2]);
    std::fs::remove_file(dir.path().join("train-images-idx3-ubyte.gz")).unwrap();
    std::fs::write(dir.path().join("train-images-idx3-ubyte"), labels).unwrap();
    let err = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(err, DataError::Idx(IdxError::BadShape { .. })), "{err}");
}

#[test]
fn a_missing_folder_says_how_to_install_the_data() {
    let err = Dataset::load(Path::new("/nonexistent/fashion")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/fashion")
            && msg.contains("dataset-fashion-mnist")
            && msg.contains("--data"),
        "{msg}"
    );
}

#[test]
fn images_must_be_28_by_28() {
    let dir = tempfile::tempdir().unwrap();
    let images = encode_idx(&[2, 14, 14], &[0u8; 2 * 196]);
    let labels = encode_idx(&[2], &[1, 2]);
    for prefix in ["train", "t10k"] {
        std::fs::write(dir.path().join(format!("{prefix}-images-idx3-ubyte")), &images).unwrap();
        std::fs::write(dir.path().join(format!("{prefix}-labels-idx1-ubyte")), &labels).unwrap();
    }
    let err = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(err, DataError::ImageSize { rows: 14, cols: 14, .. }), "{err}");
}
