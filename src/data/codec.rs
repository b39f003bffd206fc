//! How text becomes tokens and tokens text again: its bytes (a vocabulary of 256), or a Hugging
//! Face `tokenizer.json` read by Hugging Face's own `tokenizers` library, so that a file encodes
//! here as it does in its users' Python.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::dataset::DataError;
use super::tokens::TokenDtype;

/// The file a text folder's own tokenizer has, used when `--tokenizer` does not name one.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Text's tokens: bytes, or a tokenizer's ids.
pub enum TextCodec {
    Bytes,
    Tokenizer {
        tokenizer: Box<Tokenizer>,
        path: PathBuf,
        /// A fingerprint of the file's content: a changed tokenizer tokenizes again.
        fingerprint: u64,
    },
}

impl std::fmt::Debug for TextCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Two codecs are the same when they make the same tokens: bytes, or the same tokenizer file's
/// content.
impl PartialEq for TextCodec {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TextCodec::Bytes, TextCodec::Bytes) => true,
            (TextCodec::Tokenizer { fingerprint: a, .. }, TextCodec::Tokenizer { fingerprint: b, .. }) => {
                a == b
            }
            _ => false,
        }
    }
}

impl TextCodec {
    /// The codec of the text in `dir`: the tokenizer `named` (`--tokenizer`), else the folder's
    /// own `tokenizer.json`, else bytes.
    pub fn open(dir: &Path, named: Option<&Path>) -> Result<TextCodec, DataError> {
        let own = dir.join(TOKENIZER_FILE);
        let path = match named {
            Some(p) => p.to_owned(),
            None if own.is_file() => own,
            None => return Ok(TextCodec::Bytes),
        };
        let content =
            std::fs::read(&path).map_err(|e| DataError::Read { path: path.clone(), why: e.to_string() })?;
        let tokenizer = Tokenizer::from_bytes(&content).map_err(|e| DataError::Tokenizer {
            path: path.clone(),
            why: e.to_string().lines().next().unwrap_or_default().to_owned(),
        })?;
        let fingerprint = super::index_cache::fnv(&content);
        Ok(TextCodec::Tokenizer { tokenizer: Box::new(tokenizer), path, fingerprint })
    }

    /// The number of token ids (the model's vocabulary must cover them).
    pub fn vocab_size(&self) -> usize {
        match self {
            TextCodec::Bytes => 256,
            TextCodec::Tokenizer { tokenizer, .. } => tokenizer.get_vocab_size(true),
        }
    }

    /// How the cached token files store a token: u16 while the ids fit (nanoGPT's), else u32.
    pub fn dtype(&self) -> TokenDtype {
        if self.vocab_size() <= 1 << 16 {
            TokenDtype::U16
        } else {
            TokenDtype::U32
        }
    }

    /// What the tokens are, for the data's description: `bytes`, `tokens of FILE`.
    pub fn describe(&self) -> String {
        match self {
            TextCodec::Bytes => "bytes".to_owned(),
            TextCodec::Tokenizer { path, .. } => format!("tokens of {}", path.display()),
        }
    }

    /// What the tokens are, for the cache's key: a changed tokenizer file is another key.
    pub fn key(&self) -> String {
        match self {
            TextCodec::Bytes => "bytes".to_owned(),
            TextCodec::Tokenizer { fingerprint, .. } => format!("tokenizer {fingerprint:016x}"),
        }
    }

    /// The ids of each of `pieces` (no special tokens added: the text is a stream, not
    /// sentences), the pieces encoded in parallel.
    pub fn encode(&self, pieces: &[&[u8]]) -> Result<Vec<Vec<u32>>, String> {
        match self {
            TextCodec::Bytes => {
                Ok(pieces.iter().map(|p| p.iter().map(|&b| u32::from(b)).collect()).collect())
            }
            TextCodec::Tokenizer { tokenizer, .. } => {
                let texts: Vec<String> =
                    pieces.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect();
                let encodings = tokenizer.encode_batch_fast(texts, false).map_err(|e| e.to_string())?;
                Ok(encodings.iter().map(|e| e.get_ids().to_vec()).collect())
            }
        }
    }

    /// `tokens` as text (ids the tokenizer does not know are left out; bytes that are not
    /// UTF-8 shown as `�`).
    pub fn decode(&self, tokens: &[i64]) -> String {
        match self {
            TextCodec::Bytes => {
                let bytes: Vec<u8> = tokens.iter().map(|&b| b.clamp(0, 255) as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            TextCodec::Tokenizer { tokenizer, .. } => {
                let ids: Vec<u32> = tokens.iter().filter_map(|&t| u32::try_from(t).ok()).collect();
                tokenizer.decode(&ids, false).unwrap_or_else(|e| format!("(cannot decode: {e})"))
            }
        }
    }
}

/// Where `text` may be cut into pieces that a tokenizer encodes as it would encode the whole:
/// after a line break between two characters that are not white space (no pre-tokenizer joins
/// a word across a line break, and white space runs, which GPT-2's pattern splits with a
/// look-ahead, are left whole). Returns the end of the first piece of at least `size` bytes,
/// or the text's end.
pub fn cut(text: &[u8], size: usize) -> usize {
    let blank = |b: u8| b.is_ascii_whitespace();
    (size.max(1)..text.len().saturating_sub(1))
        .find(|&i| text[i] == b'\n' && !blank(text[i - 1]) && !blank(text[i + 1]))
        .map_or(text.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_only_after_a_line_break_between_non_blanks() {
        let text = b"ab\n cd\n\nef\ngh";
        assert_eq!(cut(text, 1), 11, "after 'ef\\n', the first break with no blank either side");
        assert_eq!(&text[..cut(text, 1)], b"ab\n cd\n\nef\n");
        assert_eq!(cut(text, 12), text.len(), "no cut after the last line break");
        assert_eq!(cut(b"", 4), 0);
    }

    #[test]
    fn bytes_round_trip() {
        let codec = TextCodec::Bytes;
        let ids = codec.encode(&["hé".as_bytes(), b"llo"]).unwrap().concat();
        assert_eq!(ids.len(), 6);
        let back: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        assert_eq!(codec.decode(&back), "héllo");
        assert_eq!((codec.vocab_size(), codec.dtype()), (256, TokenDtype::U16));
    }
}
