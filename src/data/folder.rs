//! An image folder: `train/<class>/<image>`, with `val/<class>/<image>` or `test/<class>/<image>`
//! or both (`val/` is then evaluated every epoch and `test/` once at the end; `val/` alone is
//! evaluated in the test set's place and named val), classes numbered in
//! the sorted order of their folder names (as torchvision's ImageFolder does), images sorted
//! by name. PNG and JPEG files decode with the `image` crate; the images are RGB unless every
//! one is grayscale, and all of one size unless `--image-size` resizes them.

use std::path::{Path, PathBuf};

use image::DynamicImage;

use super::dataset::{DataError, Dataset, Pixels, Split};
use super::index_cache::{Listing, Progress};
use super::LoadOptions;

fn sorted_entries(dir: &Path, want_dirs: bool) -> Result<Vec<PathBuf>, DataError> {
    let read =
        std::fs::read_dir(dir).map_err(|e| DataError::Read { path: dir.to_owned(), why: e.to_string() })?;
    let mut out: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| if want_dirs { p.is_dir() } else { p.is_file() })
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    out.sort();
    Ok(out)
}

fn name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Where an image comes from: a file, or `len` bytes at `offset` of a tar shard (named
/// `shard.tar/member`).
pub(super) enum ImageSource {
    File(PathBuf),
    Member { shard: PathBuf, member: String, offset: u64, len: u32 },
}

impl ImageSource {
    fn name(&self) -> PathBuf {
        match self {
            ImageSource::File(p) => p.clone(),
            ImageSource::Member { shard, member, .. } => shard.join(member),
        }
    }

    fn decode(&self) -> Result<DynamicImage, DataError> {
        let why = |e: &dyn std::fmt::Display| DataError::Decode { path: self.name(), why: e.to_string() };
        let bytes = match self {
            ImageSource::File(path) => std::fs::read(path),
            ImageSource::Member { shard, offset, len, .. } => super::stream::read_range(shard, *offset, *len),
        }
        .map_err(|e| why(&e))?;
        super::stream::decode_bytes(&bytes).map_err(|e| why(&e))
    }
}

/// Labelled images, one list per split.
pub(super) type Labelled = Vec<(ImageSource, i64)>;

/// The splits evaluated beside `dir/train`: (the test split's folder, the validation split's
/// folder when it is one of its own, whether the test split is `val/`): `val/` and `test/`
/// give a validation split and a test set, `val/` alone is evaluated in the test set's place.
pub(super) fn evaluated_dirs(dir: &Path) -> (PathBuf, Option<PathBuf>, bool) {
    let (val, test) = (dir.join("val"), dir.join("test"));
    match (val.is_dir(), test.is_dir()) {
        (true, false) => (val, None, true),
        (true, true) => (test, Some(val), false),
        (false, _) => (test, None, false),
    }
}

/// The files of one split, with their class numbers.
fn files(split_dir: &Path, classes: &[String], progress: &mut Progress) -> Result<Labelled, DataError> {
    let mut out = Vec::new();
    for class_dir in sorted_entries(split_dir, true)? {
        let class = name(&class_dir);
        let Some(index) = classes.iter().position(|c| *c == class) else {
            return Err(DataError::UnknownClass { path: class_dir, class, known: classes.to_vec() });
        };
        let images = sorted_entries(&class_dir, false)?;
        progress.add(images.len());
        out.extend(images.into_iter().map(|file| (ImageSource::File(file), index as i64)));
    }
    Ok(out)
}

/// Decodes every image to 3 planes of `size` (height, width); says whether every image was
/// grayscale.
/// Images that do not decode are left out and added to `bad`.
fn read_split(
    files: &[(ImageSource, i64)],
    size: (u32, u32),
    resize: bool,
    bad: &mut Vec<(PathBuf, String)>,
) -> Result<(Split, bool), DataError> {
    let (h, w) = size;
    let plane = (h * w) as usize;
    let mut images = Vec::with_capacity(files.len() * 3 * plane);
    let mut labels = Vec::with_capacity(files.len());
    let mut gray = true;
    for (source, label) in files {
        let img = match source.decode() {
            Ok(img) => img,
            Err(DataError::Decode { path, why }) => {
                bad.push((path, why));
                continue;
            }
            Err(e) => return Err(e),
        };
        gray &= !img.color().has_color();
        if (img.height(), img.width()) != (h, w) && !resize {
            return Err(DataError::MixedSizes {
                path: source.name(),
                found_h: img.height(),
                found_w: img.width(),
                h,
                w,
            });
        }
        // As the streaming loader fits each image, so resident and streamed data are one.
        let at = images.len();
        images.resize(at + 3 * plane, 0);
        super::stream::fit_into(img, (3, h, w), super::stream::Fit::Whole { resize }, &mut images[at..])
            .map_err(|why| DataError::Decode { path: source.name(), why: why.to_string() })?;
        labels.push(*label);
    }
    let split = Split {
        images: Pixels::Bytes(images),
        labels,
        channels: 3,
        rows: h as usize,
        cols: w as usize,
        targets: None,
    };
    Ok((split, gray))
}

/// Keeps the first plane of every sample (the gray value, which all three planes repeat).
fn to_gray(split: &mut Split) {
    let plane = split.rows * split.cols;
    if let Pixels::Bytes(v) = &split.images {
        let gray = v.chunks_exact(3 * plane).flat_map(|s| s[..plane].iter().copied()).collect();
        split.images = Pixels::Bytes(gray);
    }
    split.channels = 1;
}

/// Loads `dir/train` with `dir/val`, `dir/test` or both, as `options` say (the size every
/// image is resized to, the share of undecodable images skipped).
pub fn load(dir: &Path, options: LoadOptions) -> Result<Dataset, DataError> {
    let (listing, cached) = super::index_cache::cached(dir, "images", |progress| {
        let train_dir = dir.join("train");
        let classes: Vec<String> = sorted_entries(&train_dir, true)?.iter().map(|p| name(p)).collect();
        if classes.is_empty() {
            return Err(DataError::NoClasses { dir: train_dir });
        }
        let train = files(&train_dir, &classes, progress)?;
        let (test_dir, val_dir, test_is_val) = evaluated_dirs(dir);
        let test = files(&test_dir, &classes, progress)?;
        let val = val_dir.map(|v| files(&v, &classes, progress)).transpose()?;
        Ok(Listing { train, test, val, test_is_val, classes: Some(classes) })
    })?;
    assemble(listing, cached, options, &format!("image folder {}", dir.display()), dir)
}

/// How the data set's own `val/` is used, in the data set's description.
fn evaluated_words(test_is_val: bool, has_val: bool) -> &'static str {
    match (test_is_val, has_val) {
        (true, _) => ", val/ as the test set",
        (false, true) => ", val/ each epoch, test/ at the end",
        (false, false) => "",
    }
}

/// Decodes the splits (the size of the first training image, or `size`) into a data set: RGB
/// unless every image is grayscale; `classes` when known (else counted from the labels);
/// `what` names it in the data set's description.
pub(super) fn assemble(
    listing: Listing,
    cached: bool,
    options: LoadOptions,
    what: &str,
    dir: &Path,
) -> Result<Dataset, DataError> {
    let Listing { train, test, val, test_is_val, classes } = listing;
    let classes = classes.map(|c| c.len());
    let index = if cached { ", index from the cache" } else { "" };
    if train.is_empty() {
        return Err(DataError::NoClasses { dir: dir.join("train") });
    }
    // The size of the first training image that decodes (one that does not is found below).
    let first = train.iter().find_map(|(s, _)| s.decode().ok());
    let size = options.image_size;
    let color = first.as_ref().is_none_or(|f| f.color().has_color());
    let target = size.or(first.map(|f| (f.height(), f.width()))).unwrap_or((1, 1));
    let total = train.len() + test.len() + val.as_ref().map_or(0, Vec::len);
    let decoded = total as u64 * 3 * u64::from(target.0) * u64::from(target.1);
    if options.loader.streams(decoded, options.memory) {
        // Left on storage: the first image's size (or --image-size) decides the shape, and the
        // images are RGB unless 32 spread over the training set are all grayscale (a few gray
        // photos among colour ones, as ImageNet has, must not make the whole set gray).
        const LOOKED_AT: usize = 32;
        let spread =
            (0..LOOKED_AT.min(train.len())).map(|k| &train[k * train.len() / LOOKED_AT.min(train.len())]);
        let color = color || spread.filter_map(|(s, _)| s.decode().ok()).any(|img| img.color().has_color());
        let shape = (if color { 3 } else { 1 }, target.0 as usize, target.1 as usize);
        let (train, test, val) = super::stream::index((train, test, val), shape, size.is_some());
        let mut data = super::format::finish(train, test, String::new(), dir)?;
        data.classes = classes.unwrap_or(data.classes);
        let evaluated = evaluated_words(test_is_val, val.is_some());
        data.source = format!("{what} ({} classes{evaluated}, streamed{index})", data.classes);
        data.val = val;
        data.test_is_val = test_is_val;
        return Ok(data);
    }
    let mut bad = Vec::new();
    let (mut train, train_gray) = read_split(&train, target, size.is_some(), &mut bad)?;
    let (mut test, test_gray) = read_split(&test, target, size.is_some(), &mut bad)?;
    let mut val = val.map(|v| read_split(&v, target, size.is_some(), &mut bad)).transpose()?;
    let allowed = (options.max_bad * total as f64).floor() as usize;
    if let Some((first, why)) = bad.first().filter(|_| bad.len() > allowed) {
        return Err(DataError::TooManyUndecodable {
            count: bad.len(),
            total,
            allowed,
            fraction: options.max_bad,
            first: first.clone(),
            why: why.clone(),
        });
    }
    // RGB unless every image is grayscale.
    if train_gray && test_gray && val.as_ref().is_none_or(|(_, gray)| *gray) {
        to_gray(&mut train);
        to_gray(&mut test);
        if let Some((v, _)) = &mut val {
            to_gray(v);
        }
    }
    let evaluated = evaluated_words(test_is_val, val.is_some());
    let mut data = super::format::finish(train, test, String::new(), dir)?;
    data.classes = classes.unwrap_or(data.classes);
    let skipped = match bad.len() {
        0 => String::new(),
        1 => ", 1 undecodable image skipped".to_owned(),
        n => format!(", {n} undecodable images skipped"),
    };
    data.source = format!("{what} ({} classes{evaluated}{skipped}{index})", data.classes);
    data.skipped = bad.into_iter().map(|(p, why)| format!("{}: {why}", p.display())).collect();
    data.val = val.map(|(v, _)| v);
    data.test_is_val = test_is_val;
    Ok(data)
}
