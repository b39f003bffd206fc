//! How text becomes tokens and tokens text again: its bytes (a vocabulary of 256), or a Hugging
//! Face `tokenizer.json` read by Hugging Face's own `tokenizers` library, so that a file encodes
//! here as it does in its users' Python.

use std::path::{Path, PathBuf};

use tokenizers::{ModelWrapper, PreTokenizerWrapper, Tokenizer};

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
        let refused = |why: String| DataError::Tokenizer {
            path: path.clone(),
            why: why.lines().next().unwrap_or_default().to_owned(),
        };
        let mut tokenizer = Tokenizer::from_bytes(&content).map_err(|e| refused(e.to_string()))?;
        // Its ties broken as in Python: a Unigram's scores read as the wheel reads them.
        super::unigram_scores::as_python_reads(&mut tokenizer, &content).map_err(refused)?;
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

    /// The tokens of each of `pieces`, each with the bytes of its piece that it stands for, the
    /// pieces encoded in parallel (no special tokens added: the text is a stream, not
    /// sentences).
    pub fn encode(&self, pieces: &[&str]) -> Result<Vec<Vec<TokenAt>>, String> {
        match self {
            TextCodec::Bytes => Ok(pieces
                .iter()
                .map(|p| {
                    let at = |(i, &b): (usize, &u8)| TokenAt { id: u32::from(b), start: i, end: i + 1 };
                    p.as_bytes().iter().enumerate().map(at).collect()
                })
                .collect()),
            TextCodec::Tokenizer { tokenizer, .. } => {
                let encodings = tokenizer.encode_batch(pieces.to_vec(), false).map_err(|e| e.to_string())?;
                let tokens = |e: &tokenizers::Encoding| {
                    let at = |(&id, &(start, end)): (&u32, &(usize, usize))| TokenAt { id, start, end };
                    e.get_ids().iter().zip(e.get_offsets()).map(at).collect()
                };
                Ok(encodings.iter().map(tokens).collect())
            }
        }
    }

    /// Whether a text cut after a line break between two characters that are not white space
    /// ([`line_cut`]) encodes, piece by piece, to the whole text's ids: a byte-level BPE behind
    /// GPT-2's own pattern without a prefix space (GPT-2's, GPT-NeoX's tokenizers), no
    /// normalizer, and no added token holding a line break. Its pattern makes such a line break
    /// a pre-token of its own and BPE merges inside pre-tokens, so nothing joins across the cut;
    /// a prefix space, a `Metaspace` or another pattern may (they take the overlapping pieces
    /// of [`super::pieces`]).
    pub fn line_safe(&self) -> bool {
        let TextCodec::Tokenizer { tokenizer, .. } = self else { return false };
        let byte_level = matches!(
            tokenizer.get_pre_tokenizer(),
            Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex && !b.add_prefix_space
        );
        byte_level
            && tokenizer.get_normalizer().is_none()
            && matches!(tokenizer.get_model(), ModelWrapper::BPE(_))
            && tokenizer.get_added_tokens_decoder().values().all(|t| !t.content.contains('\n'))
    }

    /// Whether the ids of a stretch of text may depend on where its encoding began, however far
    /// before it. A Unigram model keeps each pre-token's best-scoring segmentation, and of two
    /// that score the same (`▁▁▁▁` then `▁▁▁▁▁▁▁▁`, or the reverse) the one whose score, summed
    /// from the pre-token's start, rounds higher. Behind a pre-tokenizer that splits at white
    /// space the pre-tokens are words, the same in a piece as in the whole file; behind one that
    /// does not (a `Metaspace` with `split: false`, or none) the pre-token is the whole
    /// text, and only the file encoded at once breaks its ties as Python's
    /// `Tokenizer.encode` does.
    pub fn whole_text_ties(&self) -> bool {
        let TextCodec::Tokenizer { tokenizer, .. } = self else { return false };
        self.is_unigram() && !tokenizer.get_pre_tokenizer().is_some_and(splits_at_white_space)
    }

    /// Whether the tokenizer is a Unigram (SentencePiece's model: T5's, Llama 2's kind).
    pub fn is_unigram(&self) -> bool {
        matches!(self, TextCodec::Tokenizer { tokenizer, .. } if matches!(tokenizer.get_model(), ModelWrapper::Unigram(_)))
    }

    /// The ids of each of `pieces`, encoded in parallel without their offsets (for pieces cut
    /// where [`TextCodec::line_safe`] allows).
    pub fn encode_ids(&self, pieces: &[&str]) -> Result<Vec<Vec<u32>>, String> {
        match self {
            TextCodec::Bytes => Ok(pieces.iter().map(|p| p.bytes().map(u32::from).collect()).collect()),
            TextCodec::Tokenizer { tokenizer, .. } => {
                let encodings =
                    tokenizer.encode_batch_fast(pieces.to_vec(), false).map_err(|e| e.to_string())?;
                Ok(encodings.iter().map(|e| e.get_ids().to_vec()).collect())
            }
        }
    }

    /// The ids of `text` encoded at once, as [`TextCodec::encode`] without the offsets.
    pub fn encode_whole(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            TextCodec::Bytes => Ok(text.bytes().map(u32::from).collect()),
            TextCodec::Tokenizer { tokenizer, .. } => {
                let encoding = tokenizer.encode_fast(text, false).map_err(|e| e.to_string())?;
                Ok(encoding.get_ids().to_vec())
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

/// Whether `pre` (or a pre-tokenizer of its sequence) splits text at white space.
fn splits_at_white_space(pre: &PreTokenizerWrapper) -> bool {
    match pre {
        PreTokenizerWrapper::Metaspace(m) => m.get_split(),
        PreTokenizerWrapper::ByteLevel(b) => b.use_regex,
        PreTokenizerWrapper::Whitespace(_)
        | PreTokenizerWrapper::WhitespaceSplit(_)
        | PreTokenizerWrapper::BertPreTokenizer(_) => true,
        PreTokenizerWrapper::Sequence(s) => s.as_ref().iter().any(splits_at_white_space),
        _ => false,
    }
}

/// Where `text` may be cut for a [`TextCodec::line_safe`] tokenizer: after a line break between
/// two characters that are not white space, the first such place at or after `from`; none in
/// the text.
pub fn line_cut(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    let blank = |c: u8| c.is_ascii_whitespace();
    (from.max(1)..b.len().saturating_sub(1))
        .find(|&i| b[i] == b'\n' && !blank(b[i - 1]) && !blank(b[i + 1]))
        .map(|i| i + 1)
}

/// A token and the bytes of the text it stands for (a character's bytes may stand for several).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenAt {
    pub id: u32,
    pub start: usize,
    pub end: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tokenizer of `model` (a Unigram of a few pieces, or a BPE) behind `pre_tokenizer`.
    fn tokenizer(model: &str, pre_tokenizer: &str) -> TextCodec {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let model = match model {
            "Unigram" => r#"{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["▁",-2.5],["a",-3.0]]}"#,
            _ => r#"{"type":"BPE","vocab":{"a":0,"▁":1},"merges":[]}"#,
        };
        let json = format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
                "pre_tokenizer":{pre_tokenizer},"post_processor":null,"decoder":null,"model":{model}}}"#
        );
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json).expect("written");
        TextCodec::open(dir.path(), Some(&path)).expect("a tokenizer")
    }

    #[test]
    fn only_a_unigram_over_text_not_split_at_white_space_has_ties_of_the_whole_text() {
        let metaspace = |split: bool| {
            format!(r#"{{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":{split}}}"#)
        };
        let whitespace_in_sequence = r#"{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"WhitespaceSplit"}]}"#;
        let digits = r#"{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true}]}"#;
        let cases = [
            ("Unigram", metaspace(false), true),
            ("Unigram", "null".to_owned(), true),
            ("Unigram", digits.to_owned(), true),
            ("Unigram", metaspace(true), false),
            ("Unigram", whitespace_in_sequence.to_owned(), false),
            ("BPE", metaspace(false), false),
        ];
        for (model, pre, ties) in cases {
            assert_eq!(tokenizer(model, &pre).whole_text_ties(), ties, "{model} behind {pre}");
        }
        assert!(!TextCodec::Bytes.whole_text_ties());
    }

    #[test]
    fn bytes_round_trip() {
        let codec = TextCodec::Bytes;
        let tokens = codec.encode(&["hé", "llo"]).unwrap();
        assert_eq!(
            tokens[1][2],
            TokenAt { id: u32::from(b'o'), start: 2, end: 3 },
            "at its place in its piece"
        );
        let ids: Vec<u32> = tokens.concat().iter().map(|t| t.id).collect();
        assert_eq!(ids.len(), 6);
        assert_eq!(codec.encode_whole("héllo").unwrap(), ids);
        let back: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        assert_eq!(codec.decode(&back), "héllo");
        assert_eq!((codec.vocab_size(), codec.dtype()), (256, TokenDtype::U16));
    }
}
