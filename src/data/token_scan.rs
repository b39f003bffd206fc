//! The largest token id of a token file: found by reading the file once (8 MiB at a time,
//! progress on stderr when it takes a while) and remembered under the cache, keyed by the
//! file's path, size and modification time, so a 17 GB `train.bin` is read at its first run,
//! not at every start. What a language model's vocabulary is checked against: an id at or
//! above it would fail the embedding lookup mid-run (on a GPU, as a device-side assert that
//! ends the process).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::dataset::DataError;
use super::tokens::TokenFile;

/// A file's largest token id and the offset (in tokens) of its first occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Largest {
    pub id: u32,
    pub offset: u64,
}

/// Refuses `file` if it holds a token id at or above `vocab`, naming the largest and where.
pub fn within(file: &TokenFile, vocab: i64) -> Result<(), DataError> {
    let l = largest(file)?;
    match i64::from(l.id) < vocab {
        true => Ok(()),
        false => {
            Err(DataError::TokenBeyondVocab { path: file.path.clone(), id: l.id, offset: l.offset, vocab })
        }
    }
}

/// Bytes read at a time.
const CHUNK: usize = 8 << 20;

/// The largest id of `file`, from the cache when the file is unchanged.
pub fn largest(file: &TokenFile) -> Result<Largest, DataError> {
    let read_error = |e: std::io::Error| DataError::Read { path: file.path.clone(), why: e.to_string() };
    let meta = std::fs::metadata(&file.path).map_err(read_error)?;
    let stamp = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let key = format!(
        "largest token id {} {} {} {:?}",
        file.dtype.name(),
        std::path::absolute(&file.path).unwrap_or_else(|_| file.path.clone()).display(),
        meta.len(),
        stamp.unwrap_or_default()
    );
    let cached: Option<PathBuf> = super::index_cache::cache_base()
        .map(|b| b.join("tokens").join("largest").join(format!("{:016x}", super::index_cache::fnv(&key))));
    if let Some(found) =
        cached.as_ref().and_then(|c| std::fs::read_to_string(c).ok()).and_then(|s| parse(&s, &key))
    {
        return Ok(found);
    }
    let found = scan(file)?;
    if let Some(c) = cached {
        // A cache that cannot be written costs the next start a scan, nothing else.
        let _ = c.parent().map(std::fs::create_dir_all);
        let _ =
            dpt_core::atomic::write_bytes(&c, format!("{key}\n{} {}\n", found.id, found.offset).as_bytes());
    }
    Ok(found)
}

fn parse(text: &str, key: &str) -> Option<Largest> {
    let mut lines = text.lines();
    if lines.next()? != key {
        return None;
    }
    let (id, offset) = lines.next()?.split_once(' ')?;
    Some(Largest { id: id.parse().ok()?, offset: offset.parse().ok()? })
}

/// Reads the whole file for its largest id.
fn scan(file: &TokenFile) -> Result<Largest, DataError> {
    let chunk = CHUNK / file.dtype.bytes();
    let mut bytes = Vec::with_capacity(CHUNK);
    let (mut best, mut at) = (Largest { id: 0, offset: 0 }, 0u64);
    let (started, mut said) = (Instant::now(), Instant::now());
    while at < file.tokens {
        let n = chunk.min((file.tokens - at) as usize);
        let ids = file.ids(at, n, &mut bytes)?;
        // The chunk's largest first (one pass the compiler vectorizes), then where it is.
        let top = ids.clone().max().unwrap_or(0);
        if at == 0 || top > best.id {
            let i = ids.clone().position(|v| v == top).unwrap_or(0) as u64;
            best = Largest { id: top, offset: at + i };
        }
        at += n as u64;
        if said.elapsed() > Duration::from_secs(2) {
            eprintln!(
                "dpt-tui: checking {} for token ids beyond the model's vocabulary: {:.0}%",
                file.path.display(),
                100.0 * at as f64 / file.tokens.max(1) as f64
            );
            said = Instant::now();
        }
    }
    if started.elapsed() > Duration::from_secs(2) {
        eprintln!(
            "dpt-tui: checked {} ({} tokens; remembered until it changes)",
            file.path.display(),
            file.tokens
        );
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokens::TokenDtype;

    fn file_of(ids: &[u32], dtype: TokenDtype) -> (tempfile::TempDir, TokenFile) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.bin");
        let bytes: Vec<u8> = ids.iter().flat_map(|&i| i.to_le_bytes()[..dtype.bytes()].to_vec()).collect();
        std::fs::write(&path, bytes).unwrap();
        let file = TokenFile::open(&path, dtype).unwrap();
        (dir, file)
    }

    #[test]
    fn the_largest_id_and_its_first_offset() {
        let mut ids: Vec<u32> = (0..(CHUNK as u32)).map(|i| i % 50).collect();
        ids[3_000_000] = 60_000;
        ids[7_000_000] = 60_000;
        let (_d, f) = file_of(&ids, TokenDtype::U16);
        assert_eq!(scan(&f).unwrap(), Largest { id: 60_000, offset: 3_000_000 }, "across chunks, the first");
        let (_d, f) = file_of(&[5, 70_000, 2, 70_000], TokenDtype::U32);
        assert_eq!(scan(&f).unwrap(), Largest { id: 70_000, offset: 1 });
        let (_d, f) = file_of(&[0, 0], TokenDtype::U16);
        assert_eq!(scan(&f).unwrap(), Largest { id: 0, offset: 0 });
    }

    #[test]
    fn a_remembered_scan_is_only_trusted_for_the_same_file() {
        let key = "largest token id u16 /d/train.bin 10 1s";
        assert_eq!(parse(&format!("{key}\n7 3\n"), key), Some(Largest { id: 7, offset: 3 }));
        assert_eq!(parse(&format!("{key}\n7 3\n"), "largest token id u16 /d/train.bin 12 1s"), None);
        assert_eq!(parse("garbage", key), None);
    }
}
