//! WebDataset tar shards: `train/*.tar`, with `val/*.tar`, `test/*.tar` or both (evaluated as
//! an image folder's `val/` and `test/` are), each shard holding samples as consecutive files
//! sharing a key: `<key>.jpg|jpeg|png` (the image) and `<key>.cls` (its class number as text),
//! the key being the file's path up to the first dot of its name, as WebDataset groups them.
//! Shards are read in name order and samples in shard order; the images decode as an image
//! folder's do. Read with the `tar` crate (the format of the `tar` tool; plain reading, no
//! extraction to disk).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::dataset::{DataError, Dataset};
use super::folder::{assemble, evaluated_dirs, ImageSource, Labelled};
use super::index_cache::{Listing, Progress};

/// Whether `dir` is laid out as WebDataset shards (`train/` holds `.tar` files).
pub fn detect(dir: &Path) -> bool {
    !shards(&dir.join("train")).unwrap_or_default().is_empty()
}

/// The `.tar` files in `split_dir`, sorted by name.
fn shards(split_dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let read = std::fs::read_dir(split_dir)
        .map_err(|e| DataError::Read { path: split_dir.to_owned(), why: e.to_string() })?;
    let mut out: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "tar"))
        .collect();
    out.sort();
    Ok(out)
}

/// A sample's pieces as they are found in a shard: its image member (name, offset of its
/// bytes in the shard, length) and its class.
#[derive(Default)]
struct Pieces {
    image: Option<(String, u64, u32)>,
    class: Option<i64>,
}

/// The samples of one split's shards, in order.
fn read_split(split_dir: &Path, progress: &mut Progress) -> Result<Labelled, DataError> {
    let mut out = Vec::new();
    for shard in shards(split_dir)? {
        let before = out.len();
        let bad = |why: String| DataError::Decode { path: shard.clone(), why };
        let file = std::fs::File::open(&shard).map_err(|e| bad(e.to_string()))?;
        let mut archive = tar::Archive::new(file);
        let mut order: Vec<String> = Vec::new();
        let mut samples: HashMap<String, Pieces> = HashMap::new();
        // Headers only: the members' bytes are skipped by seeking, not read.
        for entry in archive.entries_with_seek().map_err(|e| bad(e.to_string()))? {
            let mut entry = entry.map_err(|e| bad(format!("not a readable tar file ({e})")))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let path = entry.path().map_err(|e| bad(e.to_string()))?.to_string_lossy().into_owned();
            let (dir, name) = path.rsplit_once('/').map_or(("", path.as_str()), |(d, n)| (d, n));
            let Some((stem, ext)) = name.split_once('.') else { continue };
            let key = if dir.is_empty() { stem.to_owned() } else { format!("{dir}/{stem}") };
            let pieces = samples.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                Pieces::default()
            });
            match ext.to_ascii_lowercase().as_str() {
                // The image stays in the shard: where it is is enough to read it when needed.
                "jpg" | "jpeg" | "png" => {
                    let len = u32::try_from(entry.size())
                        .map_err(|_| bad(format!("{path} is larger than 4 GiB, not an image")))?;
                    pieces.image = Some((path.clone(), entry.raw_file_position(), len));
                }
                "cls" => {
                    let mut bytes = Vec::new();
                    entry.read_to_end(&mut bytes).map_err(|e| bad(format!("{path}: {e}")))?;
                    let text = String::from_utf8_lossy(&bytes);
                    let class = text
                        .trim()
                        .parse::<i64>()
                        .map_err(|_| bad(format!("{path} holds '{}', not a class number", text.trim())))?;
                    pieces.class = Some(class);
                }
                _ => {}
            }
        }
        for key in order {
            let pieces = samples.remove(&key).unwrap_or_default();
            let missing = |what: &str| bad(format!("sample '{key}' has no {what}"));
            let (member, offset, len) = pieces.image.ok_or_else(|| missing(".jpg or .png"))?;
            let class = pieces.class.ok_or_else(|| missing(".cls"))?;
            out.push((ImageSource::Member { shard: shard.clone(), member, offset, len }, class));
        }
        progress.add(out.len() - before);
    }
    Ok(out)
}

/// Loads `dir/train/*.tar` with `dir/val/*.tar`, `dir/test/*.tar` or both, as `options` say.
pub fn load(dir: &Path, options: super::LoadOptions) -> Result<Dataset, DataError> {
    let (listing, cached) = super::index_cache::cached(dir, "webdataset", |progress| {
        let train = read_split(&dir.join("train"), progress)?;
        let (test_dir, val_dir, test_is_val) = evaluated_dirs(dir);
        let test = read_split(&test_dir, progress)?;
        let val = val_dir.map(|v| read_split(&v, progress)).transpose()?;
        Ok(Listing { train, test, val, test_is_val, classes: None })
    })?;
    assemble(listing, cached, options, &format!("WebDataset shards in {}", dir.display()), dir)
}
