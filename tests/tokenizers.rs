//! Text through a Hugging Face tokenizer.json: the cached token files equal what Hugging Face's
//! own Python library makes of the same files (`tests/scripts/tokenizer.py`), also for files
//! long enough to be encoded in pieces, with tokenizers that encode a piece by what precedes it
//! (a prefix space, a SentencePiece-style `Metaspace`); a GPT trains on them from the command line, samples text
//! decoded by the tokenizer, and finds the folder's own tokenizer.json; a broken tokenizer and
//! token ids beyond the model's vocabulary are refused in one line before anything is written.

use crate::common;
use common::Dpt;

use std::path::{Path, PathBuf};
use std::process::Command;

use dpt_tui::data::codec::TextCodec;
use dpt_tui::data::pieces::Cutting;
use dpt_tui::data::text::tokenized_in;

use common::tokens::{make_gpt, token_dir, write_tokens, BLOCK, VOCAB};

/// The byte-level BPE's vocabulary in these tests.
const TOKENIZER_VOCAB: usize = 320;

/// The vocabulary of the tokenizers every kind of text is compared on: large enough that a
/// Unigram learns runs of punctuation of several lengths, whose segmentations tie.
const VOCAB_WITH_TIES: usize = 2000;

fn tokenizer_py(args: &[&str]) {
    let status =
        Command::new(common::python()).arg(common::script("tokenizer.py")).args(args).status().unwrap();
    assert!(status.success(), "tokenizer.py {args:?} (bash .ci/setup installs the tokenizers package)");
}

/// A tokenizer of `kind` (`tests/scripts/tokenizer.py train`) trained on `files`, saved as `out`.
fn train_tokenizer(kind: &str, out: &Path, files: &[PathBuf]) {
    train_tokenizer_of(TOKENIZER_VOCAB, kind, out, files);
}

/// [`train_tokenizer`] with a vocabulary of `vocab` ids.
fn train_tokenizer_of(vocab: usize, kind: &str, out: &Path, files: &[PathBuf]) {
    let mut args = vec!["train", kind].into_iter().map(str::to_owned).collect::<Vec<_>>();
    args.extend([out.display().to_string(), vocab.to_string()]);
    args.extend(files.iter().map(|f| f.display().to_string()));
    tokenizer_py(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let codec = TextCodec::open(out.parent().unwrap(), Some(out)).unwrap();
    // The trainers stop early when nothing is left to learn.
    assert!((258..=vocab).contains(&codec.vocab_size()), "{}", codec.vocab_size());
}

/// The ids of the `.txt` files of `text` with `tok`: ours, cut as `cutting` says, and those
/// Python's `Tokenizer.encode` gives each file whole.
fn ours_and_pythons(text: &Path, files: &[PathBuf], tok: &Path, cutting: Cutting) -> (Vec<u16>, Vec<u16>) {
    let scratch = tok.with_extension("ref");
    std::fs::create_dir_all(&scratch).unwrap();
    let (ref_train, ref_val) = (scratch.join("train.bin"), scratch.join("val.bin"));
    let mut args = vec!["encode".to_owned()];
    args.extend([tok, &ref_train, &ref_val].map(|p| p.display().to_string()));
    args.extend(files.iter().map(|f| f.display().to_string()));
    tokenizer_py(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let codec = TextCodec::open(text, Some(tok)).unwrap();
    // The cache's key is the files and the tokenizer: a folder of its own per cutting.
    let home = scratch.join(format!("cache-{}-{}-{}", cutting.piece, cutting.overlap, cutting.whole));
    let cache = tokenized_in(text, &codec, &home, cutting).unwrap();
    let ids = |files: [&Path; 2]| -> Vec<u16> {
        let bytes = [std::fs::read(files[0]).unwrap(), std::fs::read(files[1]).unwrap()].concat();
        bytes.chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
    };
    (ids([&cache.join("train.bin"), &cache.join("val.bin")]), ids([&ref_train, &ref_val]))
}

/// [`ours_and_pythons`] compared: the number of tokens, or how they differ (the first token
/// that does).
fn compare_with_python(
    text: &Path,
    files: &[PathBuf],
    tok: &Path,
    cutting: Cutting,
) -> Result<usize, String> {
    let (ours, theirs) = ours_and_pythons(text, files, tok, cutting);
    if ours != theirs {
        let first = ours.iter().zip(&theirs).position(|(x, y)| x != y);
        return Err(format!(
            "{}: {} ids against Python's {}, the first different at token {first:?}",
            tok.display(),
            ours.len(),
            theirs.len()
        ));
    }
    Ok(ours.len())
}

/// A fixed stream of draws from `seed`: each call gives a number below its argument.
fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    }
}

/// Lines of words from a fixed stream, with what a tokenizer's pre-tokenizer treats apart:
/// leading spaces and runs of them, blank lines, tabs, punctuation, digits and non-ASCII letters.
fn prose(bytes: usize, seed: u64) -> String {
    const WORDS: [&str; 16] = [
        "the", "cat", "sat", "on", "mat", "and", "dog's", "log", "naïve", "café", "日本", "1999", "--",
        "it's", "Über", "x",
    ];
    let mut draw = draws(seed);
    let mut text = String::new();
    while text.len() < bytes {
        let line: Vec<&str> = (0..1 + draw(12)).map(|_| WORDS[draw(16) as usize]).collect();
        match draw(10) {
            0 => text.push_str(&format!("  {}\n", line.join(" "))),
            1 => text.push_str(&format!("{}.\n\n", line.join("  "))),
            2 => text.push_str(&format!("{}\t\n", line.join(" "))),
            3 => text.push_str(&format!("\t{}\n", line.join("\t"))),
            4 => text.push_str(&format!("{}    \n", line.join("     "))),
            _ => text.push_str(&format!("{}.\n", line.join(" "))),
        }
    }
    text
}

#[test]
fn the_cache_holds_what_hugging_faces_own_library_makes_of_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::create_dir_all(&text).unwrap();
    // 2.5 MiB: encoded in pieces of about 1 MiB, cut where the tokenizer splits anyway.
    let files = [text.join("a.txt"), text.join("b.txt")];
    std::fs::write(&files[0], prose(5 << 19, 1)).unwrap();
    std::fs::write(&files[1], prose(20_000, 2)).unwrap();
    let tok = dir.path().join("bpe.json");
    train_tokenizer("byte-level", &tok, &files);
    let tokens = compare_with_python(&text, &files, &tok, Cutting::default()).unwrap();
    assert!(tokens > 100_000, "a real amount of tokens: {tokens}");

    let codec = TextCodec::open(&text, Some(&tok)).unwrap();
    let cache =
        tokenized_in(&text, &codec, &tok.with_extension("ref").join("cache"), Cutting::default()).unwrap();
    // The tokenizer decodes its ids back to the text.
    let ids: Vec<i64> = std::fs::read(cache.join("train.bin")).unwrap()[..400]
        .chunks(2)
        .map(|b| i64::from(u16::from_le_bytes([b[0], b[1]])))
        .collect();
    let start = std::fs::read_to_string(&files[0]).unwrap();
    assert!(start.starts_with(&codec.decode(&ids)), "{:?}", codec.decode(&ids));
    // Bytes are the other codec: another cache.
    let bytes_cache =
        tokenized_in(&text, &TextCodec::Bytes, &tok.with_extension("ref").join("cache"), Cutting::default());
    assert_ne!(bytes_cache.unwrap(), cache);
}

/// Lines where a Unigram's segmentations tie (the same pieces in another order score the same):
/// long runs of one punctuation character, comment rules, `//` after spaces and dotted version
/// numbers, from a fixed stream.
fn runs(bytes: usize, seed: u64) -> String {
    let mut draw = draws(seed);
    let mut text = String::new();
    while text.len() < bytes {
        let run = |c: char, n: u64| c.to_string().repeat(3 + n as usize);
        let line = match draw(6) {
            0 => run(['-', '#', '=', '*', '/', '.', '~'][draw(7) as usize], draw(77)),
            1 => format!("{}// {} cat {}", " ".repeat(draw(13) as usize), run('-', draw(20)), draw(100)),
            2 => format!("# {} the mat {}", run('#', draw(40)), run('#', draw(9))),
            3 => format!("/* {} */", run('=', draw(60))),
            4 => {
                let parts: Vec<String> = (0..2 + draw(6)).map(|_| draw(11).to_string()).collect();
                format!("version {}{}", parts.join("."), if draw(2) == 0 { "." } else { "" })
            }
            _ => format!("{}//{}", " ".repeat(1 + draw(8) as usize), run('/', draw(5))),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Python sources, prose with tabs and runs of spaces, a line longer than a piece, and the
/// [`runs`] where segmentations tie, as four files in `dir/text`: the folder and the files.
fn text_of_every_kind(dir: &Path) -> (PathBuf, [PathBuf; 4]) {
    let text = dir.join("text");
    std::fs::create_dir_all(&text).unwrap();
    let files = [
        text.join("a-source.txt"),
        text.join("b-prose.txt"),
        text.join("c-long-line.txt"),
        text.join("d-runs.txt"),
    ];
    let mut sources: Vec<PathBuf> = std::fs::read_dir(common::script("."))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    sources.sort();
    let source: String = sources.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    assert!(source.len() > 30_000, "{}", source.len());
    std::fs::write(&files[0], source).unwrap();
    std::fs::write(&files[1], prose(100_000, 3)).unwrap();
    // Longer than a batch of pieces (8 of 8 KiB): a tokenizer cut at line breaks turns to
    // overlapping pieces in it.
    let long_line = prose(80_000, 4).replace('\n', " ");
    std::fs::write(&files[2], format!("{}{long_line}\n{}", prose(3_000, 5), prose(3_000, 6))).unwrap();
    std::fs::write(&files[3], runs(60_000, 7)).unwrap();
    (text, files)
}

/// Pieces of 8 KiB, each with the 1 KiB before it; a file whose tokenizer's ties depend on the
/// whole text is encoded whole up to `whole` bytes.
fn small_pieces(whole: usize) -> Cutting {
    Cutting { piece: 8 << 10, overlap: 1 << 10, whole }
}

/// The text of [`text_of_every_kind`] cut into pieces of 8 KiB: every kind of tokenizer gives
/// Python's ids for each file whole, also those that encode a piece's start as a text's start
/// (a `Metaspace` or a prefix space add a word boundary there that the whole file does not
/// have); a Unigram behind a `Metaspace` that does not split at spaces, whose ties depend on the
/// whole text, has its files encoded whole.
#[test]
fn every_kind_of_tokenizer_gives_pythons_ids_for_text_encoded_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let (text, files) = text_of_every_kind(dir.path());
    let kinds = ["byte-level", "prefix-space", "metaspace", "metaspace-first", "metaspace-nfkc"];
    let differences: Vec<String> = kinds
        .into_iter()
        .filter_map(|kind| {
            let tok = dir.path().join(format!("{kind}.json"));
            train_tokenizer_of(VOCAB_WITH_TIES, kind, &tok, &files);
            let codec = TextCodec::open(&text, Some(&tok)).unwrap();
            assert_eq!(
                codec.line_safe(),
                kind == "byte-level",
                "{kind}: cut at line breaks only when nothing joins across"
            );
            assert_eq!(codec.whole_text_ties(), kind == "metaspace-first", "{kind}: ties of the whole text");
            compare_with_python(&text, &files, &tok, small_pieces(128 << 10)).err()
        })
        .collect();
    assert!(differences.is_empty(), "{differences:#?}");
}

/// The scores of the Unigram in `tok` as Python's library holds them after reading the file,
/// and as dpt-tui's codec does.
fn scores_of_both(tok: &Path) -> (Vec<f64>, Vec<f64>) {
    let out = tok.with_extension("scores.json");
    tokenizer_py(&["scores", tok.to_str().unwrap(), out.to_str().unwrap()]);
    let pythons: Vec<f64> = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let codec = TextCodec::open(tok.parent().unwrap(), Some(tok)).unwrap();
    let TextCodec::Tokenizer { tokenizer, .. } = &codec else { panic!("a tokenizer") };
    let tokenizers::ModelWrapper::Unigram(unigram) = tokenizer.get_model() else { panic!("a Unigram") };
    (unigram.iter().map(|(_, score)| *score).collect(), pythons)
}

/// A Unigram's scores are the doubles Python's library reads from the file (about one score of
/// 17 digits in five a unit in the last place off the nearest double), bit for bit: those of a
/// trained tokenizer, and 4,000 drawn in every form a JSON number takes.
#[test]
fn a_unigram_holds_the_scores_python_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (_, files) = text_of_every_kind(dir.path());
    let trained = dir.path().join("trained.json");
    train_tokenizer("metaspace-nfkc", &trained, &files);
    let (ours, pythons) = scores_of_both(&trained);
    assert_eq!(ours.len(), pythons.len());
    let off = ours.iter().zip(&pythons).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(off, 0, "{off} of {} scores differ from Python's", ours.len());

    let mut draw = draws(11);
    let mut digits = |n: u64| (0..n).map(|_| char::from(b'0' + draw(10) as u8)).collect::<String>();
    let mut texts = vec!["0.0".to_owned(), "-5".to_owned(), "-0.5".to_owned()];
    for i in 0..4_000u64 {
        let frac = digits(1 + i % 24);
        texts.push(match i % 5 {
            0 => format!("-{}.{frac}e-{}", 1 + i % 9, i % 40),
            1 => format!("-{}{}.{frac}", 1 + i % 9, digits(i % 22)),
            2 => format!("-0.000{frac}"),
            3 => format!("-{}.{frac}E+{}", 1 + i % 9, i % 3),
            _ => format!("-{}.{frac}", 1 + i % 30),
        });
    }
    let vocab: Vec<String> = texts.iter().enumerate().map(|(i, t)| format!("[\"p{i}\", {t}]")).collect();
    let drawn = dir.path().join("drawn.json");
    let json = format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":null,"post_processor":null,"decoder":null,
            "model":{{"type":"Unigram","unk_id":0,"vocab":[{}],"byte_fallback":false}}}}"#,
        vocab.join(",")
    );
    std::fs::write(&drawn, json).unwrap();
    let (ours, pythons) = scores_of_both(&drawn);
    let nearest: Vec<f64> = texts.iter().map(|t| t.parse().unwrap()).collect();
    let rounded_otherwise = nearest.iter().zip(&pythons).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert!(rounded_otherwise > 400, "Python reads {rounded_otherwise} scores off the nearest double");
    for ((text, ours), pythons) in texts.iter().zip(&ours).zip(&pythons) {
        assert_eq!(ours.to_bits(), pythons.to_bits(), "{text}: {ours} against Python's {pythons}");
    }
}

/// A Unigram of letters and runs of 1, 4 and 8 spaces behind a `Metaspace` that does not split
/// at spaces, saved as `path`: twelve spaces are 4 + 8 or 8 + 4, at the same
/// score, and which it keeps depends on how the score summed since the text's start rounds.
fn unigram_with_ties(path: &Path) {
    let mut vocab = vec![
        serde_json::json!(["<unk>", 0.0]),
        serde_json::json!(["\n", -2.650595278838571]),
        serde_json::json!(["▁", -2.753028703004931]),
        serde_json::json!(["▁▁▁▁", -4.212512622854189]),
        serde_json::json!(["▁▁▁▁▁▁▁▁", -5.837206754350296]),
    ];
    for (i, c) in ('a'..='z').enumerate() {
        let i = i as f64;
        vocab.push(serde_json::json!([c.to_string(), -(3.0 + 0.1371 * i + 0.0123 * i * i)]));
    }
    let metaspace = serde_json::json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false});
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "normalizer": null,
        "added_tokens": [{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "pre_tokenizer": metaspace, "post_processor": null, "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": false},
    });
    std::fs::write(path, serde_json::to_vec(&json).unwrap()).unwrap();
}

/// Lines of letters, each indented by twelve spaces, from a fixed stream.
fn indented(bytes: usize, seed: u64) -> String {
    let mut draw = draws(seed);
    let mut text = String::new();
    while text.len() < bytes {
        text.push_str("            ");
        for _ in 0..1 + draw(8) {
            let word: String = (0..1 + draw(7)).map(|_| char::from(b'a' + draw(26) as u8)).collect();
            text.push_str(&word);
            text.push(' ');
        }
        text.push('\n');
    }
    text
}

/// A Unigram behind a `Metaspace` that does not split at spaces: each file is
/// encoded whole, which alone breaks its ties as Python does; cut into pieces (a file longer
/// than `Cutting::whole`), its ids differ from Python's, but only where two segmentations of the
/// same bytes score the same (each stretch where the ids differ covers the same bytes, and its
/// scores sum to the same, to float rounding).
#[test]
fn a_unigram_over_whole_lines_breaks_its_ties_as_python_only_when_encoded_whole() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::create_dir_all(&text).unwrap();
    let files = [text.join("a.txt"), text.join("b.txt")];
    std::fs::write(&files[0], indented(1 << 20, 1)).unwrap();
    std::fs::write(&files[1], indented(30_000, 2)).unwrap();
    let tok = dir.path().join("ties.json");
    unigram_with_ties(&tok);
    assert!(TextCodec::open(&text, Some(&tok)).unwrap().whole_text_ties());
    compare_with_python(&text, &files, &tok, small_pieces(2 << 20)).unwrap();

    let (ours, theirs) = ours_and_pythons(&text, &files, &tok, small_pieces(0));
    let model: serde_json::Value = serde_json::from_slice(&std::fs::read(&tok).unwrap()).unwrap();
    let vocab: Vec<(usize, f64)> = model["model"]["vocab"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().len(), p[1].as_f64().unwrap()))
        .collect();
    // Walk both: where both have a token boundary at the same byte (of the normalized text),
    // the stretches since the last such place must score the same.
    let (mut i, mut j, mut at_i, mut at_j) = (0, 0, 0, 0);
    let (mut score_i, mut score_j, mut ties) = (0.0f64, 0.0f64, 0);
    let (mut stretch_i, mut stretch_j) = (0, 0);
    while i < ours.len() || j < theirs.len() {
        if j == theirs.len() || (i < ours.len() && at_i <= at_j) {
            let (len, score) = vocab[usize::from(ours[i])];
            (at_i, score_i, i) = (at_i + len, score_i + score, i + 1);
        } else {
            let (len, score) = vocab[usize::from(theirs[j])];
            (at_j, score_j, j) = (at_j + len, score_j + score, j + 1);
        }
        if at_i == at_j {
            let same = ours[stretch_i..i] == theirs[stretch_j..j];
            let close = (score_i - score_j).abs() <= 1e-9 * score_i.abs().max(1.0);
            assert!(
                same || close,
                "ids {stretch_i}..{i} score {score_i} against Python's {stretch_j}..{j} {score_j}"
            );
            ties += usize::from(!same);
            (stretch_i, stretch_j, score_i, score_j) = (i, j, 0.0, 0.0);
        }
    }
    assert_eq!(at_i, at_j, "the same bytes");
    // A fixed text and tokenizer: 8 of its ties are broken otherwise in pieces of 8 KiB.
    assert!(ties > 0, "cut into pieces, some ties are broken otherwise");
}

fn dpt(args: &[&str], cache: &Path) -> std::process::Output {
    Dpt::new().arg("--headless").args(args).env("XDG_CACHE_HOME", cache).output()
}

#[test]
fn a_gpt_trains_on_tokenized_text_samples_through_the_tokenizer_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::create_dir_all(&text).unwrap();
    let verse = "the cat sat on the mat. the dog lay on the log.\n";
    std::fs::write(text.join("a.txt"), verse.repeat(300)).unwrap();
    let tok = dir.path().join("bpe.json");
    train_tokenizer("byte-level", &tok, &[text.join("a.txt")]);
    let gpt = dir.path().join("gpt320.pt");
    let vocab = TOKENIZER_VOCAB.to_string();
    common::made_by_python(&gpt, common::GPT, &["make", common::OUT, &vocab, &BLOCK.to_string(), "script"]);
    let cache = dir.path().join("cache");
    let (gpt_s, text_s, tok_s) = (gpt.to_str().unwrap(), text.to_str().unwrap(), tok.to_str().unwrap());
    let train = ["--block-size", "16", "--steps", "120", "--eval-every", "60", "--batch-size", "16"];
    let recipe = ["--optimizer", "adamw", "--lr", "1e-2", "--devices", "cpu:2"];
    let run = dir.path().join("run");
    let args = [&["--model", gpt_s, "--data", text_s, "--tokenizer", tok_s][..], &train, &recipe];
    let out = dpt(&[&args.concat()[..], &["--run-dir", run.to_str().unwrap()]].concat(), &cache);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records = common::wait_for_summary(&run, std::time::Duration::from_secs(5));
    assert!(records[0]["data"].as_str().unwrap().contains("tokens of"), "{}", records[0]["data"]);
    let evals: Vec<f64> =
        records.iter().filter(|r| r["kind"] == "epoch").map(|r| r["test_loss"].as_f64().unwrap()).collect();
    assert!(evals[1] < 0.5 * (TOKENIZER_VOCAB as f64).ln(), "val loss {evals:?}");
    let sample = records.iter().rev().find(|r| r["event"] == "sampled").expect("a sample");
    let (prompt, text_out) = (sample["prompt"].as_str().unwrap(), sample["text"].as_str().unwrap());
    assert!(verse.repeat(2).contains(prompt), "the prompt decodes to the validation text: {prompt:?}");
    assert!(text_out.contains(" the "), "the continuation decodes to words: {text_out:?}");

    // The folder's own tokenizer.json is used without the flag.
    std::fs::copy(&tok, text.join("tokenizer.json")).unwrap();
    let own = dir.path().join("own");
    let short = ["--block-size", "16", "--steps", "4", "--eval-every", "4", "--batch-size", "16"];
    let out = dpt(
        &[&["--model", gpt_s, "--data", text_s][..], &short, &["--run-dir", own.to_str().unwrap()]].concat(),
        &cache,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records = common::wait_for_summary(&own, std::time::Duration::from_secs(5));
    assert!(records[0]["data"].as_str().unwrap().contains("tokenizer.json"), "{}", records[0]["data"]);

    // Refused in one line, exit 2, before a run directory is made.
    let refused = |args: &[&str], says: &str| {
        let bad = dir.path().join("bad");
        let out = dpt(&[args, &["--run-dir", bad.to_str().unwrap()][..]].concat(), &cache);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says) && stderr.trim().lines().count() == 1, "{args:?}: {stderr}");
        assert!(!bad.exists(), "nothing written for {args:?}");
    };
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"model\": 3}").unwrap();
    refused(
        &[&["--model", gpt_s, "--data", text_s, "--tokenizer", broken.to_str().unwrap()][..], &short]
            .concat(),
        "give --tokenizer a Hugging Face tokenizer.json",
    );
    let tokens = token_dir(dir.path(), 20_000);
    refused(
        &[&["--model", gpt_s, "--data", tokens.to_str().unwrap(), "--tokenizer", tok_s][..], &short].concat(),
        "is not text: drop it",
    );
    // One token id beyond a 64-token model's vocabulary, far into train.bin: found by the scan.
    let mut ids: Vec<u16> = std::fs::read(tokens.join("train.bin"))
        .unwrap()
        .chunks(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    ids[17_321] = VOCAB as u16;
    write_tokens(&tokens.join("train.bin"), &ids);
    let small = make_gpt("script", dir.path());
    refused(
        &[&["--model", small.to_str().unwrap(), "--data", tokens.to_str().unwrap()][..], &short].concat(),
        &format!("token id {VOCAB} (at token 17321) is beyond the model's vocabulary of {VOCAB}"),
    );
}
