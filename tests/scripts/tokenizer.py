"""Hugging Face's own tokenizers library (Python) for dpt-tui's tokenizer tests.

`python tokenizer.py train KIND OUT.json VOCAB FILE...`
    Trains a tokenizer of VOCAB ids on FILEs and saves it as tokenizer.json. KIND is one of
    `byte-level` (a BPE with GPT-2's pre-tokenizer and decoder and an <|endoftext|> special
    token), `prefix-space` (the same with `add_prefix_space`, as RoBERTa's), `metaspace` (a
    SentencePiece-style Unigram behind a `Metaspace` pre-tokenizer, as T5's) or
    `metaspace-first` (the same Unigram behind Llama 2's pre-tokenizer: a `▁` before the text's
    first word only, the text not split at spaces) or `metaspace-nfkc` (the same Unigram behind
    NFKC and a `Metaspace` that puts a `▁` before the first word only and splits at spaces).

`python tokenizer.py encode TOKENIZER.json TRAIN.bin VAL.bin FILE...`
    Encodes each FILE whole (UTF-8 text, no special tokens added), joins the ids in the order
    given, and writes the first 90 % (floor) to TRAIN.bin and the rest to VAL.bin as
    little-endian uint16: what dpt-tui's cache must hold for the same files.

`python tokenizer.py scores TOKENIZER.json OUT.json`
    Writes the Unigram scores the library holds after loading TOKENIZER.json, as a JSON list
    (each the shortest decimal that reads back as the same double).
"""
import sys

import json

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers


def byte_level_bpe(vocab, add_prefix_space):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    return tok, trainer


def metaspace_unigram(vocab, first_only, nfkc=False):
    tok = Tokenizer(models.Unigram())
    if nfkc:
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
        tok.decoder = decoders.Metaspace(prepend_scheme="first", split=True)
    elif first_only:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(prepend_scheme="first", split=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
    )
    return tok, trainer


def train(kind, out, vocab, files):
    if kind == "byte-level":
        tok, trainer = byte_level_bpe(vocab, add_prefix_space=False)
    elif kind == "prefix-space":
        tok, trainer = byte_level_bpe(vocab, add_prefix_space=True)
    elif kind == "metaspace":
        tok, trainer = metaspace_unigram(vocab, first_only=False)
    elif kind == "metaspace-first":
        tok, trainer = metaspace_unigram(vocab, first_only=True)
    elif kind == "metaspace-nfkc":
        tok, trainer = metaspace_unigram(vocab, first_only=True, nfkc=True)
    else:
        sys.exit(f"unknown tokenizer kind {kind!r}")
    tok.train(files, trainer)
    tok.save(out)


def encode(tokenizer, train_out, val_out, files):
    tok = Tokenizer.from_file(tokenizer)
    ids = []
    for f in files:
        with open(f, encoding="utf-8", newline="") as fh:
            ids.extend(tok.encode(fh.read(), add_special_tokens=False).ids)
    split = int(len(ids) * 0.9)
    np.array(ids[:split], dtype="<u2").tofile(train_out)
    np.array(ids[split:], dtype="<u2").tofile(val_out)


def scores(tokenizer, out):
    # The library writes each score it holds as the shortest decimal of that double, which
    # Python's own float() reads back exactly.
    model = json.loads(Tokenizer.from_file(tokenizer).to_str())["model"]
    with open(out, "w") as fh:
        json.dump([float(score) for _, score in model["vocab"]], fh)


def main():
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
    elif sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    elif sys.argv[1] == "scores":
        scores(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
