"""The plain PyTorch loop dpt-tui's language-model benchmark compares against: the GPT of
assets/pytorch/gpt.py trained eagerly (as nanoGPT's train.py trains it, without torch.compile) on
windows of a uint16 token file drawn as nanoGPT's get_batch draws them, AdamW, on the CPU.

`python lm_reference.py DATA_DIR VOCAB BLOCK WIDTH LAYERS HEADS BATCH STEPS THREADS`

Prints one JSON line: {"tokens_per_sec", "samples_per_sec", "final_loss"}, timed over every
step, the first ones included, as dpt-tui's summary record times its own.
"""
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "pytorch"))
from gpt import Gpt  # noqa: E402

def main():
    data = sys.argv[1]
    vocab, block, width, layers, heads, batch, steps, threads = map(int, sys.argv[2:10])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Gpt(vocab, block, width, layers, heads)
    model.train()
    tokens = np.memmap(os.path.join(data, "train.bin"), dtype=np.uint16, mode="r")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
    start = time.perf_counter()
    for _ in range(steps):
        ix = torch.randint(len(tokens) - block, (batch,))
        x = torch.stack([torch.from_numpy(tokens[i : i + block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(tokens[i + 1 : i + 1 + block].astype(np.int64)) for i in ix])
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - start
    samples = batch * steps / seconds
    print(json.dumps({"tokens_per_sec": samples * block, "samples_per_sec": samples, "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
