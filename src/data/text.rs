//! A folder of `.txt` files as token data: its bytes are the tokens (a vocabulary of 256), the
//! files read in name order, the first 90 % of all bytes for training and the rest for
//! validation (as nanoGPT's character-level prepare scripts split). Tokenized once into
//! `train.bin` and `val.bin` (uint16, nanoGPT's layout) under
//! `$XDG_CACHE_HOME/dpt-tui/tokens/<hash>/` (else `~/.cache/...`), valid while the files keep
//! their names, sizes and modification times; the data folder itself is only read.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::dataset::DataError;

/// The share of the bytes that trains; the rest validates.
const TRAIN_SHARE: f64 = 0.9;

/// The `.txt` files of `dir`, in name order.
fn text_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

/// Whether `dir` holds text to tokenize: `.txt` files and no token files.
pub fn detect(dir: &Path) -> bool {
    !super::tokens::detect(dir) && !text_files(dir).is_empty()
}

/// The folder holding `dir`'s text as `train.bin` and `val.bin`: the cached one if its files
/// are unchanged, else made now (the progress said on stderr).
pub fn tokenized(dir: &Path) -> Result<PathBuf, DataError> {
    let base = super::index_cache::cache_base().ok_or_else(|| DataError::Read {
        path: dir.to_owned(),
        why: "no $HOME or $XDG_CACHE_HOME to cache its tokens in".into(),
    })?;
    tokenized_in(dir, &base)
}

/// [`tokenized`] with the cache under `base`.
fn tokenized_in(dir: &Path, base: &Path) -> Result<PathBuf, DataError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let files = text_files(&dir);
    if files.is_empty() {
        return Err(DataError::Unknown { path: dir });
    }
    let mut print = format!("dpt-tui text bytes 1 {}\n", dir.display());
    let mut total = 0u64;
    for f in &files {
        let m = std::fs::metadata(f).map_err(|e| DataError::Read { path: f.clone(), why: e.to_string() })?;
        let stamp = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        print.push_str(&format!("{} {} {:?}\n", f.display(), m.len(), stamp.unwrap_or_default()));
        total += m.len();
    }
    let cache = base.join("tokens").join(format!("{:016x}", super::index_cache::fnv(&print)));
    let stamp_file = cache.join("source.txt");
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == print) {
        return Ok(cache);
    }
    let cache_error = |e: std::io::Error| DataError::Read { path: cache.clone(), why: e.to_string() };
    std::fs::create_dir_all(&cache).map_err(cache_error)?;
    // A partial earlier attempt is written over; the stamp, written last, marks a whole one.
    let _ = std::fs::remove_file(&stamp_file);
    let split_at = (total as f64 * TRAIN_SHARE) as u64;
    if split_at == 0 || split_at == total {
        return Err(DataError::TextTooShort { dir, bytes: total });
    }
    let mut train = BufWriter::new(std::fs::File::create(cache.join("train.bin")).map_err(cache_error)?);
    let mut val = BufWriter::new(std::fs::File::create(cache.join("val.bin")).map_err(cache_error)?);
    let (mut done, started, mut said) = (0u64, Instant::now(), Instant::now());
    let mut buf = vec![0u8; 1 << 20];
    for f in &files {
        let read_error = |e: std::io::Error| DataError::Read { path: f.clone(), why: e.to_string() };
        let mut file = std::fs::File::open(f).map_err(read_error)?;
        loop {
            let n = file.read(&mut buf).map_err(read_error)?;
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                let out = if done < split_at { &mut train } else { &mut val };
                out.write_all(&u16::from(b).to_le_bytes()).map_err(cache_error)?;
                done += 1;
            }
            if said.elapsed() > Duration::from_secs(2) {
                eprintln!(
                    "dpt-tui: tokenizing {}: {:.0}% of {} bytes",
                    dir.display(),
                    100.0 * done as f64 / total as f64,
                    total
                );
                said = Instant::now();
            }
        }
    }
    train.flush().map_err(cache_error)?;
    val.flush().map_err(cache_error)?;
    drop((train, val));
    dpt_protocol::atomic::write_bytes(&stamp_file, print.as_bytes()).map_err(cache_error)?;
    if started.elapsed() > Duration::from_secs(2) {
        eprintln!("dpt-tui: tokenized {} bytes of {} into {}", total, dir.display(), cache.display());
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_byte_tokens_split_nine_to_one_and_is_cached() {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), "klmnopqrst").unwrap();
        std::fs::write(dir.path().join("a.txt"), "abcdefghij").unwrap();
        assert!(detect(dir.path()));
        let cache = tokenized_in(dir.path(), home.path()).unwrap();
        let read = |name: &str| -> Vec<u16> {
            std::fs::read(cache.join(name))
                .unwrap()
                .chunks(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect()
        };
        let all: Vec<u16> = "abcdefghijklmnopqrst".bytes().map(u16::from).collect();
        assert_eq!(read("train.bin"), all[..18], "files in name order, 90 % for training");
        assert_eq!(read("val.bin"), all[18..]);
        assert_eq!(tokenized_in(dir.path(), home.path()).unwrap(), cache, "the same files: the same cache");
        std::fs::write(dir.path().join("c.txt"), "uvwxyz0123").unwrap();
        assert_ne!(tokenized_in(dir.path(), home.path()).unwrap(), cache, "another file: tokenized again");
    }
}
