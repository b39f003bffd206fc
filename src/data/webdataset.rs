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
    let all = shards(split_dir)?;
    let mut cut: Vec<(PathBuf, String, u64)> = Vec::new();
    for shard in &all {
        let before = out.len();
        let bad = |why: String| DataError::Decode { path: shard.clone(), why };
        let file = std::fs::File::open(shard).map_err(|e| bad(e.to_string()))?;
        let has = file.metadata().map_err(|e| bad(e.to_string()))?.len();
        let mut archive = tar::Archive::new(file);
        // Where the last member's bytes end: a whole shard goes on past it with the archive's
        // end (two zero blocks), a copy cut short does not.
        let mut last: Option<(String, u64)> = None;
        let mut order: Vec<String> = Vec::new();
        let mut samples: HashMap<String, Pieces> = HashMap::new();
        // Headers only: the members' bytes are skipped by seeking, not read.
        for entry in archive.entries_with_seek().map_err(|e| bad(e.to_string()))? {
            let entry = match entry {
                Ok(entry) => entry,
                // A header the file ends inside of: the shard is cut short there.
                Err(_) if last.as_ref().is_some_and(|(_, end)| has < end + 1024) => break,
                Err(e) => return Err(bad(format!("not a readable tar file ({e})"))),
            };
            let mut entry = entry;
            let path = entry.path().map_err(|e| bad(e.to_string()))?.to_string_lossy().into_owned();
            last = Some((path.clone(), entry.raw_file_position() + entry.size()));
            if !entry.header().entry_type().is_file() {
                continue;
            }
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
        // A member's bytes past the file's end, or no room left for the archive's end.
        if let Some((member, end)) = last.filter(|(_, end)| has < end.div_ceil(512) * 512 + 1024) {
            let at = if has < end {
                format!("inside member '{member}', which needs {end}")
            } else {
                format!("right after member '{member}', without the archive's end")
            };
            cut.push((shard.clone(), at, has));
            continue;
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
    // Every shard is read first, so the message says whether the rest can train.
    let whole = all.len() - cut.len();
    match cut.into_iter().next() {
        Some((path, at, has)) => Err(DataError::ShardCut { path, at, has, whole, shards: all.len() }),
        None => Ok(out),
    }
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
