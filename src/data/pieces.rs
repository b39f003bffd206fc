//! How a file's text becomes its tokenizer's ids a batch of pieces at a time, the pieces
//! encoded in parallel and joined where neighbours agree ([`super::seam`]), so that the ids are
//! those of the whole file encoded at once while only a batch of pieces is held. A tokenizer
//! that nothing joins across a line break between words (GPT-2's byte-level BPE,
//! [`TextCodec::line_safe`]) has its pieces cut there instead, encoded without overlap or
//! offsets. A tokenizer whose ids depend on where the encoding began
//! ([`TextCodec::whole_text_ties`]) has each file up to [`Cutting::whole`] encoded at once.

use super::codec::{line_cut, TextCodec, TokenAt};
use super::seam::{Joiner, NoSeam};

/// Pieces encoded together, in parallel.
const BATCH: usize = 8;

/// How a file's text is cut for encoding: pieces of `piece` bytes, each encoded together with
/// the `overlap` bytes before it, so that two neighbours' tokens can be joined where they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cutting {
    /// Bytes of a file's text that one piece adds (at least 4, a character's longest).
    pub piece: usize,
    /// Bytes before a piece that are encoded with it, and with the piece before it: room for
    /// the row of tokens both must share ([`super::seam`]) between their edges.
    pub overlap: usize,
    /// Bytes of a file encoded at once, whole, when its tokenizer's ties depend on the whole
    /// text ([`TextCodec::whole_text_ties`]); a longer file is encoded in pieces, where a tie
    /// may be broken otherwise than in the whole file.
    pub whole: usize,
}

impl Default for Cutting {
    /// Pieces of 1 MiB, each overlapping the one before by 16 KiB (1.6 % encoded twice); files
    /// up to 16 MiB whole where ties need it. Measured with Python's `tokenizers` 0.22.2 (the
    /// same Rust library) on this project's 2-core machine: 16 MiB of prose through a Unigram
    /// of 320 pieces behind an unsplit `Metaspace` peaked at 1.75 GB resident (about 105 bytes
    /// per byte of text) and took 13.7 s.
    fn default() -> Cutting {
        Cutting { piece: 1 << 20, overlap: 16 << 10, whole: 16 << 20 }
    }
}

/// Why a file's ids could not be made in pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PieceError {
    /// The tokenizer refused a piece.
    Tokenizer(String),
    /// Two pieces found no seam: only the whole file encoded at once gives its ids.
    NoSeam(NoSeam),
}

/// One file's ids as its bytes arrive.
pub struct FileEncoder<'a> {
    codec: &'a TextCodec,
    cutting: Cutting,
    /// The text read and still needed (by a piece not yet encoded), from byte `base` on.
    text: String,
    base: usize,
    /// Where the next piece's own bytes begin, after its overlap.
    next: usize,
    /// The first bytes of a character whose rest is not read yet.
    partial: Vec<u8>,
    joiner: Joiner,
    /// The pieces are cut at line breaks the tokenizer cannot join across and encoded without
    /// overlap or offsets ([`TextCodec::line_safe`]), until a line too long for a batch of
    /// pieces turns the rest of the file to overlapping pieces.
    lines: bool,
    /// The next piece starts where the line-cut pieces stopped: it takes no overlap.
    fresh: bool,
    /// The file is held to be encoded at once ([`TextCodec::whole_text_ties`]), until it
    /// outgrows [`Cutting::whole`].
    whole: bool,
    /// The file outgrew [`Cutting::whole`]: its ties may be broken otherwise than in the whole.
    outgrown: bool,
}

impl<'a> FileEncoder<'a> {
    /// An encoder for one file's text (which `codec` is given as UTF-8, invalid bytes as `�`,
    /// as Rust's lossy conversion makes of the whole file).
    pub fn new(codec: &'a TextCodec, cutting: Cutting) -> FileEncoder<'a> {
        let cutting = Cutting { piece: cutting.piece.max(4), ..cutting };
        let (text, partial, joiner) = (String::new(), Vec::new(), Joiner::default());
        let (lines, whole) = (codec.line_safe(), codec.whole_text_ties());
        let (next, fresh, outgrown) = (0, false, false);
        FileEncoder { codec, cutting, text, base: 0, next, partial, joiner, lines, fresh, whole, outgrown }
    }

    /// Whether the file was too long to be encoded whole though its tokenizer's ties depend on
    /// the whole text: its ids may differ from the whole file's at a tie.
    pub fn outgrew_whole(&self) -> bool {
        self.outgrown
    }

    /// Takes the file's next `bytes` and returns the ids they settle (none until a batch of
    /// pieces is read; bytes are their own ids at once).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<u32>, PieceError> {
        if let TextCodec::Bytes = self.codec {
            return Ok(bytes.iter().map(|&b| u32::from(b)).collect());
        }
        self.append(bytes);
        if self.whole {
            if self.text.len() <= self.cutting.whole {
                return Ok(Vec::new());
            }
            (self.whole, self.outgrown) = (false, true);
        }
        if self.base + self.text.len() - self.next < BATCH * self.cutting.piece {
            return Ok(Vec::new());
        }
        self.encode(false)
    }

    /// The ids of the rest of the file, once it has ended.
    pub fn finish(&mut self) -> Result<Vec<u32>, PieceError> {
        if !self.partial.is_empty() {
            self.partial.clear();
            self.text.push(char::REPLACEMENT_CHARACTER);
        }
        if std::mem::take(&mut self.whole) {
            let ids = self.codec.encode_whole(&self.text).map_err(PieceError::Tokenizer)?;
            self.text.clear();
            return Ok(ids);
        }
        let mut ids = self.encode(true)?;
        ids.extend(self.joiner.finish());
        Ok(ids)
    }

    /// Adds `bytes` to the text as UTF-8, keeping a character cut short for the next bytes.
    fn append(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let held = std::mem::take(&mut self.partial);
        let mut chunks = held.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.text.push_str(chunk.valid());
            let invalid = chunk.invalid();
            let cut_short = || std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if invalid.is_empty() {
                continue;
            } else if chunks.peek().is_none() && cut_short() {
                self.partial = invalid.to_vec();
            } else {
                self.text.push(char::REPLACEMENT_CHARACTER);
            }
        }
    }

    /// Encodes the pieces held that end at a line break the tokenizer cannot join across (and,
    /// at the file's end, the rest); `None` when a batch of pieces' text holds no such line
    /// break after the first piece's worth, which the overlapping pieces then take.
    fn encode_lines(&mut self, at_end: bool) -> Result<Option<Vec<u32>>, PieceError> {
        let end = self.base + self.text.len();
        let mut ranges = Vec::new();
        while self.next < end {
            let from = (self.next + self.cutting.piece - self.base).min(self.text.len());
            let stop = match line_cut(&self.text, from) {
                Some(i) => self.base + i,
                None if at_end => end,
                None => break,
            };
            ranges.push((self.next, stop));
            self.next = stop;
        }
        if ranges.is_empty() && !at_end {
            return Ok(None);
        }
        let pieces: Vec<&str> =
            ranges.iter().map(|&(a, b)| &self.text[a - self.base..b - self.base]).collect();
        let ids = self.codec.encode_ids(&pieces).map_err(PieceError::Tokenizer)?.concat();
        self.text.drain(..self.next - self.base);
        self.base = self.next;
        Ok(Some(ids))
    }

    /// Encodes the whole pieces held (and, at the file's end, the rest) and joins them.
    fn encode(&mut self, at_end: bool) -> Result<Vec<u32>, PieceError> {
        if self.lines {
            match self.encode_lines(at_end)? {
                Some(ids) => return Ok(ids),
                None => (self.lines, self.fresh) = (false, true),
            }
        }
        let end = self.base + self.text.len();
        let mut ranges = Vec::new();
        while self.next < end {
            // A piece of at least 4 bytes holds a character boundary: it is never empty.
            let stop = self.boundary(self.next + self.cutting.piece);
            if stop == end && !at_end {
                break;
            }
            let overlap = if std::mem::take(&mut self.fresh) { 0 } else { self.cutting.overlap };
            ranges.push((self.boundary(self.next.saturating_sub(overlap)), stop));
            self.next = stop;
        }
        let pieces: Vec<&str> =
            ranges.iter().map(|&(a, b)| &self.text[a - self.base..b - self.base]).collect();
        let encoded = self.codec.encode(&pieces).map_err(PieceError::Tokenizer)?;
        let mut ids = Vec::new();
        for (&(start, stop), tokens) in ranges.iter().zip(encoded) {
            let placed =
                tokens.into_iter().map(|t| TokenAt { start: t.start + start, end: t.end + start, ..t });
            ids.extend(self.joiner.push(start, stop, placed.collect()).map_err(PieceError::NoSeam)?);
        }
        // The next piece's overlap is the oldest text still needed.
        let keep = self.boundary(self.next.saturating_sub(self.cutting.overlap));
        self.text.drain(..keep - self.base);
        self.base = keep;
        Ok(ids)
    }

    /// The last character boundary at or before `at` (a place in the file's text) in the text
    /// held, or the held text's start.
    fn boundary(&self, at: usize) -> usize {
        let at = at.clamp(self.base, self.base + self.text.len()) - self.base;
        self.base + (0..=at).rev().find(|&i| self.text.is_char_boundary(i)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tokenizer of whole words, one id per word it knows and `[UNK]` for the rest.
    fn words() -> (tempfile::TempDir, TextCodec) {
        let dir = tempfile::tempdir().unwrap();
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1,"café":2,"日本":3,"cat":4},"unk_token":"[UNK]"}}"#;
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let codec = TextCodec::open(dir.path(), None).unwrap();
        (dir, codec)
    }

    /// The ids of `bytes` given to an encoder `at_once` bytes at a time.
    fn in_pieces(codec: &TextCodec, cutting: Cutting, bytes: &[u8], at_once: usize) -> Vec<u32> {
        let mut encoder = FileEncoder::new(codec, cutting);
        let mut ids: Vec<u32> = bytes.chunks(at_once).flat_map(|b| encoder.push(b).unwrap()).collect();
        ids.extend(encoder.finish().unwrap());
        ids
    }

    #[test]
    fn text_read_in_any_chunks_gives_the_ids_of_the_whole() {
        let (_dir, codec) = words();
        let mut bytes = "the café 日本\tcat  x\n".repeat(60).into_bytes();
        // A byte that is not UTF-8, and a character cut short by the file's end.
        bytes[500] = 0xff;
        bytes.extend_from_slice(&"日".as_bytes()[..2]);
        let whole = codec.encode_whole(&String::from_utf8_lossy(&bytes)).unwrap();
        assert!(whole.contains(&3) && whole.len() > 200, "{whole:?}");
        let cutting = Cutting { piece: 64, overlap: 48, whole: 0 };
        for at_once in [1, 2, 7, 100, bytes.len()] {
            assert_eq!(in_pieces(&codec, cutting, &bytes, at_once), whole, "read {at_once} bytes at a time");
        }
    }

    #[test]
    fn a_file_whose_ties_need_the_whole_text_is_encoded_whole_up_to_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false},
            "post_processor":null,"decoder":null,
            "model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["▁",-2.5],["a",-3.0],["▁a",-4.0]]}}"#;
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let codec = TextCodec::open(dir.path(), None).unwrap();
        let bytes = "a a  aa a\n".repeat(40).into_bytes();
        let whole = codec.encode_whole(&String::from_utf8_lossy(&bytes)).unwrap();
        for (bound, outgrown) in [(bytes.len(), false), (bytes.len() - 1, true)] {
            let mut encoder = FileEncoder::new(&codec, Cutting { piece: 64, overlap: 48, whole: bound });
            let mut ids: Vec<u32> = bytes.chunks(7).flat_map(|b| encoder.push(b).unwrap()).collect();
            ids.extend(encoder.finish().unwrap());
            assert_eq!(encoder.outgrew_whole(), outgrown, "{} bytes, {bound} whole", bytes.len());
            assert_eq!(ids, whole, "no tie here: pieces give the whole text's ids too");
        }
    }

    #[test]
    fn bytes_are_their_own_ids_as_they_arrive() {
        let mut encoder = FileEncoder::new(&TextCodec::Bytes, Cutting::default());
        assert_eq!(encoder.push(&[b'a', 0xff]), Ok(vec![97, 255]));
        assert_eq!(encoder.finish(), Ok(vec![]));
    }
}
