//! A Unigram tokenizer's scores as Hugging Face's Python library holds them, so that its ties
//! break as they do in its users' Python.
//!
//! A Unigram keeps, of the segmentations of a word, the one whose scores sum highest; two that
//! sum to the same in exact arithmetic (a run of `-` as `--`+`-` or `-`+`--`, `1.0.0.` as
//! `1.`+`0.`+`0.` or `1`+`.0`+`.0`+`.`) are told apart by the last bit of their float sums. The
//! Python wheel (and any build of the `tokenizers` crate whose `serde_json` lacks the
//! `float_roundtrip` feature) reads a score's decimal text as its digits in a `u64` times or
//! over a power of ten, in floating point: about one score in five lands one unit in the last
//! place away from the nearest double. This program's own records need exact floats, so its
//! `serde_json` rounds correctly, and the crate, built with it, would read other scores and
//! break some ties the other way. [`python_scores`] reads the scores the wheel's way, and
//! [`as_python_reads`] puts them into a loaded tokenizer.

use serde::Deserialize;
use serde_json::value::RawValue;
use tokenizers::models::unigram::Unigram;
use tokenizers::{ModelWrapper, Tokenizer};

/// The part of a `tokenizer.json` this needs: the model's kind and the raw text of its fields.
#[derive(Deserialize)]
struct File<'a> {
    #[serde(borrow)]
    model: Model<'a>,
}

#[derive(Deserialize)]
struct Model<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(borrow)]
    vocab: Option<&'a RawValue>,
    unk_id: Option<usize>,
    #[serde(default)]
    byte_fallback: bool,
}

/// A Unigram's fields, as its `Unigram::from` takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct UnigramFields {
    pub vocab: Vec<(String, f64)>,
    pub unk_id: Option<usize>,
    pub byte_fallback: bool,
}

/// The fields of a Unigram's `tokenizer.json` (`content`), each score as the Python wheel
/// reads it; `None` when the model is not a Unigram or its vocabulary is not a list of
/// `[piece, score]`.
pub fn python_scores(content: &[u8]) -> Option<UnigramFields> {
    let file: File = serde_json::from_slice(content).ok()?;
    if file.model.kind.as_deref() != Some("Unigram") {
        return None;
    }
    let pairs: Vec<(String, &RawValue)> = serde_json::from_str(file.model.vocab?.get()).ok()?;
    let vocab = pairs
        .into_iter()
        .map(|(piece, score)| Some((piece, decimal_as_python_reads(score.get())?)))
        .collect::<Option<Vec<_>>>()?;
    Some(UnigramFields { vocab, unk_id: file.model.unk_id, byte_fallback: file.model.byte_fallback })
}

/// `tokenizer` (loaded from `content`) with its Unigram's scores as Python reads them; any
/// other model unchanged.
pub fn as_python_reads(tokenizer: &mut Tokenizer, content: &[u8]) -> Result<(), String> {
    if !matches!(tokenizer.get_model(), ModelWrapper::Unigram(_)) {
        return Ok(());
    }
    let fields = python_scores(content).ok_or("its Unigram's vocabulary is not a list of [piece, score]")?;
    let unigram =
        Unigram::from(fields.vocab, fields.unk_id, fields.byte_fallback).map_err(|e| e.to_string())?;
    tokenizer.with_model(ModelWrapper::Unigram(unigram));
    Ok(())
}

/// A JSON number's text as the wheel's `serde_json` reads it: its digits gathered in a `u64`
/// (those after the 19th or 20th, where the next would overflow, left out and counted in the
/// exponent), the `u64` made a double, then multiplied or divided once by the power of ten of
/// the exponent (in steps of 1e308 below 1e-308). `None` for text that is not a JSON number or
/// a value out of range.
pub fn decimal_as_python_reads(text: &str) -> Option<f64> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let bytes = rest.as_bytes();
    let mut i = 0;
    let (mut significand, mut exponent) = (0u64, 0i32);
    // The digits before the point, or after it: each that still fits goes into the significand;
    // from the first that would overflow on, that part's digits are dropped (a dropped digit
    // before the point still scales the value by ten).
    let mut digits = |i: &mut usize, after_point: bool| {
        let (start, mut full) = (*i, false);
        while let Some(&c) = bytes.get(*i).filter(|c| c.is_ascii_digit()) {
            let digit = u64::from(c - b'0');
            match significand.checked_mul(10).and_then(|s| s.checked_add(digit)) {
                Some(s) if !full => {
                    significand = s;
                    exponent -= i32::from(after_point);
                }
                _ => {
                    full = true;
                    exponent += i32::from(!after_point);
                }
            }
            *i += 1;
        }
        *i - start
    };
    let integer = digits(&mut i, false);
    if integer == 0 || (integer > 1 && bytes[0] == b'0') {
        return None;
    }
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i, true) == 0 {
            return None;
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let sign = match bytes.get(i) {
            Some(b'-') => {
                i += 1;
                -1
            }
            Some(b'+') => {
                i += 1;
                1
            }
            _ => 1,
        };
        let start = i;
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let exp: i32 = rest.get(start..i).filter(|s| !s.is_empty())?.parse().ok()?;
        exponent = exponent.saturating_add(sign * exp);
    }
    if i != bytes.len() {
        return None;
    }
    let magnitude = scaled(significand as f64, exponent)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// `f` times ten to the `exponent`, one rounding per multiplication or division.
fn scaled(mut f: f64, mut exponent: i32) -> Option<f64> {
    let power = |e: u32| format!("1e{e}").parse::<f64>().ok();
    loop {
        if exponent.unsigned_abs() <= 308 {
            let pow = power(exponent.unsigned_abs())?;
            if exponent >= 0 {
                f *= pow;
                return f.is_finite().then_some(f);
            }
            return Some(f / pow);
        }
        if f == 0.0 {
            return Some(f);
        }
        if exponent >= 0 {
            return None;
        }
        f /= 1e308;
        exponent += 308;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_decimals_read_exactly_and_long_ones_round_twice() {
        for (text, value) in [("0.0", 0.0), ("-5", -5.0), ("-2.5", -2.5), ("1e3", 1000.0), ("-0.125", -0.125)]
        {
            assert_eq!(decimal_as_python_reads(text), Some(value), "{text}");
        }
        // 17 digits: the u64 rounds to a double, and the division by 1e16 rounds again.
        let text = "-7.2594274484050025";
        let nearest: f64 = text.parse().unwrap();
        let read = decimal_as_python_reads(text).unwrap();
        assert_eq!(read, -(72594274484050025u64 as f64) / 1e16);
        assert_eq!(read.to_bits().abs_diff(nearest.to_bits()), 1, "one unit in the last place off");
    }

    #[test]
    fn digits_past_a_u64_are_dropped_and_what_is_not_a_number_is_refused() {
        // 21 digits: the 21st overflows and scales the value by ten.
        assert_eq!(decimal_as_python_reads("123456789012345678901"), Some(12345678901234567890.0 * 10.0));
        assert_eq!(decimal_as_python_reads("1e-400"), Some(0.0));
        for bad in ["", "-", "01", "1.", ".5", "1e", "1e+", "x", "1.5x", "1e999"] {
            assert_eq!(decimal_as_python_reads(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_a_unigram_has_scores_to_read() {
        let unigram =
            br#"{"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-7.2594274484050025]]}}"#;
        let fields = python_scores(unigram).unwrap();
        assert_eq!((fields.unk_id, fields.byte_fallback), (Some(0), false));
        assert_eq!(
            fields.vocab[1],
            ("a".to_owned(), decimal_as_python_reads("-7.2594274484050025").unwrap())
        );
        assert_eq!(python_scores(br#"{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}"#), None);
    }
}
