//! A folder of `.txt` files as token data: its bytes are the tokens (a vocabulary of 256), or a
//! tokenizer's ids (`codec`; each file's ids those of the file encoded whole, `pieces`), the
//! files read in name order, the first 90 % of all tokens for
//! training and the rest for validation (as nanoGPT's prepare scripts split). Tokenized once into
//! `train.bin` and `val.bin` (nanoGPT's layout; uint16, or uint32 for a vocabulary beyond
//! 65,536) under `$XDG_CACHE_HOME/dpt-tui/tokens/<hash>/` (else `~/.cache/...`), valid while the
//! files keep their names, sizes and modification times and the tokenizer its content; the data
//! folder itself is only read.

use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::codec::TextCodec;
use super::dataset::DataError;
use super::pieces::{Cutting, FileEncoder, PieceError};

/// The share of the tokens that trains; the rest validates.
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

/// The folder holding `dir`'s text as `train.bin` and `val.bin` in `codec`'s tokens: the
/// cached one if its files and the tokenizer are unchanged, else made now (the progress said on
/// stderr).
pub fn tokenized(dir: &Path, codec: &TextCodec) -> Result<PathBuf, DataError> {
    let base = super::index_cache::cache_base().ok_or_else(|| DataError::Read {
        path: dir.to_owned(),
        why: "no $HOME or $XDG_CACHE_HOME to cache its tokens in".into(),
    })?;
    tokenized_in(dir, codec, &base, Cutting::default())
}

/// Bytes read from a file at once.
const READ: usize = 1 << 20;

/// [`tokenized`] with the cache under `base`, each file's text encoded in pieces as `cutting`
/// says.
pub fn tokenized_in(
    dir: &Path,
    codec: &TextCodec,
    base: &Path,
    cutting: Cutting,
) -> Result<PathBuf, DataError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let files = text_files(&dir);
    if files.is_empty() {
        return Err(DataError::Unknown { path: dir });
    }
    // 3: each file's ids those of the file whole (2 cut files where some tokenizers encode a
    // piece's start otherwise); 5 for a Unigram, whose scores are now read as Python reads them
    // (4, and 3 before it, broke some ties otherwise). Other tokenizers' caches stay valid.
    let version = if codec.is_unigram() { 5 } else { 3 };
    let mut print = format!("dpt-tui text {version} {} {}\n", codec.key(), dir.display());
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
    // Every token goes to train.bin first; the last tenth then moves to val.bin.
    let train_path = cache.join("train.bin");
    let open =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&train_path);
    let mut train = TokenWriter::new(open.map_err(cache_error)?, codec.dtype().bytes());
    let (mut read, started, mut said) = (0u64, Instant::now(), Instant::now());
    let mut buf = vec![0u8; READ];
    for f in &files {
        let read_error = |e: std::io::Error| DataError::Read { path: f.clone(), why: e.to_string() };
        let encode_error = |why: String| DataError::Tokenizer { path: f.clone(), why };
        let mut file = std::fs::File::open(f).map_err(read_error)?;
        let (mut encoder, from, read_before) = (FileEncoder::new(codec, cutting), train.count(), read);
        loop {
            let n = file.read(&mut buf).map_err(read_error)?;
            read += n as u64;
            let ids = if n == 0 { encoder.finish() } else { encoder.push(&buf[..n]) };
            match ids {
                Ok(ids) => train.write(&ids).map_err(cache_error)?,
                Err(PieceError::Tokenizer(why)) => return Err(encode_error(why)),
                Err(PieceError::NoSeam(_)) => {
                    // Two of its pieces share no tokens: the file is encoded whole.
                    let text = std::fs::read(f).map_err(read_error)?;
                    let ids = codec.encode_whole(&String::from_utf8_lossy(&text)).map_err(encode_error)?;
                    train.rewind(from).map_err(cache_error)?;
                    train.write(&ids).map_err(cache_error)?;
                    read = read_before + text.len() as u64;
                    break;
                }
            }
            if n == 0 {
                if encoder.outgrew_whole() {
                    eprintln!(
                        "dpt-tui: {} is over {} MiB and was encoded in pieces: where two of its \
                         tokenizer's segmentations score the same, a piece may keep the other one \
                         than the whole file would",
                        f.display(),
                        cutting.whole >> 20
                    );
                }
                break;
            }
            if said.elapsed() > Duration::from_secs(2) {
                eprintln!(
                    "dpt-tui: tokenizing {}: {:.0}% of {} bytes",
                    dir.display(),
                    100.0 * read as f64 / total.max(1) as f64,
                    total
                );
                said = Instant::now();
            }
        }
    }
    let (tokens, width) = (train.count(), codec.dtype().bytes());
    let mut train = train.into_file().map_err(cache_error)?;
    let split_at = (tokens as f64 * TRAIN_SHARE) as u64;
    if split_at == 0 || split_at == tokens {
        return Err(DataError::TextTooShort { dir, tokens });
    }
    train.seek(SeekFrom::Start(split_at * width as u64)).map_err(cache_error)?;
    let mut val = std::fs::File::create(cache.join("val.bin")).map_err(cache_error)?;
    std::io::copy(&mut train, &mut val).map_err(cache_error)?;
    train.set_len(split_at * width as u64).map_err(cache_error)?;
    drop((train, val));
    dpt_core::atomic::write_bytes(&stamp_file, print.as_bytes()).map_err(cache_error)?;
    if started.elapsed() > Duration::from_secs(2) {
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "dpt-tui: tokenized {total} bytes of {} into {tokens} tokens in {seconds:.1} s ({:.1} MB/s), cached in {}",
            dir.display(),
            total as f64 / seconds / 1e6,
            cache.display()
        );
    }
    Ok(cache)
}

/// Token ids written to a file, `width` little-endian bytes each, and counted.
struct TokenWriter {
    out: BufWriter<std::fs::File>,
    width: usize,
    count: u64,
}

impl TokenWriter {
    fn new(file: std::fs::File, width: usize) -> TokenWriter {
        TokenWriter { out: BufWriter::new(file), width, count: 0 }
    }

    /// The ids written.
    fn count(&self) -> u64 {
        self.count
    }

    fn write(&mut self, ids: &[u32]) -> std::io::Result<()> {
        for &id in ids {
            self.out.write_all(&id.to_le_bytes()[..self.width])?;
        }
        self.count += ids.len() as u64;
        Ok(())
    }

    /// Drops the ids written after the first `count`, to write others in their place.
    fn rewind(&mut self, count: u64) -> std::io::Result<()> {
        self.out.flush()?;
        let bytes = count * self.width as u64;
        self.out.get_mut().set_len(bytes)?;
        self.out.get_mut().seek(SeekFrom::Start(bytes))?;
        self.count = count;
        Ok(())
    }

    /// The file, everything written to it.
    fn into_file(self) -> std::io::Result<std::fs::File> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
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
        let cache = tokenized_in(dir.path(), &TextCodec::Bytes, home.path(), Cutting::default()).unwrap();
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
        assert_eq!(
            tokenized_in(dir.path(), &TextCodec::Bytes, home.path(), Cutting::default()).unwrap(),
            cache,
            "the same files: the same cache"
        );
        std::fs::write(dir.path().join("c.txt"), "uvwxyz0123").unwrap();
        assert_ne!(
            tokenized_in(dir.path(), &TextCodec::Bytes, home.path(), Cutting::default()).unwrap(),
            cache,
            "another file: tokenized again"
        );
        // Caches of every codec but a Unigram keep their key's version 3.
        let stamp = std::fs::read_to_string(cache.join("source.txt")).unwrap();
        assert!(stamp.starts_with("dpt-tui text 3 bytes "), "{stamp}");
    }

    #[test]
    fn a_unigrams_caches_are_made_again_since_its_scores_are_read_as_python_reads_them() {
        // Behind a Metaspace that splits at spaces or not: version 5 (4 and 3 broke some of
        // its ties otherwise than Python).
        for split in [false, true] {
            let home = tempfile::tempdir().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let json = format!(
                r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
                "pre_tokenizer":{{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":{split}}},
                "post_processor":null,"decoder":null,
                "model":{{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["▁",-2.5],["a",-3.0]]}}}}"#
            );
            std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
            std::fs::write(dir.path().join("a.txt"), "a a aa a ".repeat(20)).unwrap();
            let codec = TextCodec::open(dir.path(), None).unwrap();
            let cache = tokenized_in(dir.path(), &codec, home.path(), Cutting::default()).unwrap();
            let stamp = std::fs::read_to_string(cache.join("source.txt")).unwrap();
            assert!(stamp.starts_with("dpt-tui text 5 tokenizer "), "split {split}: {stamp}");
        }
    }

    #[test]
    fn text_too_short_to_split_is_refused_and_not_cached() {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        let e = tokenized_in(dir.path(), &TextCodec::Bytes, home.path(), Cutting::default()).unwrap_err();
        assert!(matches!(e, DataError::TextTooShort { tokens: 1, .. }), "{e}");
        assert!(e.to_string().contains("make 1 tokens, too few to split"), "{e}");
        let stamps: Vec<_> = walk(home.path()).into_iter().filter(|p| p.ends_with("source.txt")).collect();
        assert!(stamps.is_empty(), "a refused text leaves no cache that a later run would trust: {stamps:?}");
    }

    #[test]
    fn a_tokenizer_that_cannot_encode_the_text_names_the_file() {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a b a").unwrap();
        // A word-level vocabulary without its unknown token: "b" cannot be encoded.
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"[UNK]"}}"#;
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let codec = TextCodec::open(dir.path(), None).unwrap();
        let e = tokenized_in(dir.path(), &codec, home.path(), Cutting::default()).unwrap_err();
        let DataError::Tokenizer { path, why } = &e else { panic!("{e}") };
        assert_eq!(path, &dir.path().join("a.txt"), "{e}");
        assert!(why.contains("[UNK]"), "{e}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }

    #[test]
    fn a_file_whose_pieces_never_agree_is_encoded_whole() {
        let home = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a ".repeat(100)).unwrap();
        // A word longer than the pieces' overlap, which this tokenizer makes one [UNK] of: the
        // pieces that share part of it see two shorter words.
        let long = format!("{}{}{}", "a ".repeat(5), "b".repeat(40), " a".repeat(5));
        std::fs::write(dir.path().join("b.txt"), long).unwrap();
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0,"[UNK]":1},"unk_token":"[UNK]"}}"#;
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let codec = TextCodec::open(dir.path(), None).unwrap();
        let cutting = Cutting { piece: 16, overlap: 4, whole: 0 };
        let cache = tokenized_in(dir.path(), &codec, home.path(), cutting).unwrap();
        let ids: Vec<u16> =
            [std::fs::read(cache.join("train.bin")).unwrap(), std::fs::read(cache.join("val.bin")).unwrap()]
                .concat()
                .chunks(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
        let whole = [vec![0; 100], vec![0; 5], vec![1], vec![0; 5]].concat();
        assert_eq!(ids, whole, "a.txt in pieces, b.txt whole in place of its pieces' ids");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .flat_map(|e| {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    vec![p]
                }
            })
            .collect()
    }
}
