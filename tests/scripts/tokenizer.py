"""Hugging Face's own tokenizers library (Python) for dpt-tui's tokenizer tests.

`python tokenizer.py train OUT.json VOCAB FILE...`
    Trains a byte-level BPE (GPT-2's pre-tokenizer and decoder, an <|endoftext|> special token)
    of VOCAB ids on FILEs and saves it as tokenizer.json.

`python tokenizer.py encode TOKENIZER.json TRAIN.bin VAL.bin FILE...`
    Encodes each FILE whole (UTF-8 text, no special tokens added), joins the ids in the order
    given, and writes the first 90 % (floor) to TRAIN.bin and the rest to VAL.bin as
    little-endian uint16: what dpt-tui's cache must hold for the same files.
"""
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def train(out, vocab, files):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
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


def main():
    if sys.argv[1] == "train":
        train(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
