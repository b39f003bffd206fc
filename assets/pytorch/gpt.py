"""nanoGPT's architecture for dpt-tui: the GPT of its language-model tests, and PyTorch's own
training loops for it (the reference the tests compare with, and the loop `dpt-tui bench` runs).

`python gpt.py make OUT.pt VOCAB BLOCK script|trace|logits [WIDTH LAYERS HEADS]`
    Writes the model: nanoGPT's architecture (token and position embeddings, pre-LayerNorm
    blocks of causal self-attention through scaled_dot_product_attention and a GELU MLP, a final
    LayerNorm, the output head tied to the token embedding), 2 layers, 2 heads, 32 wide unless
    told, no dropout, seeded. `script`: torch.jit.script of forward(idx, targets) -> (logits, loss);
    `trace`: torch.jit.trace of the same on an example batch (how nanoGPT's own model.py, which
    does not script, is exported); `logits`: forward(idx) -> logits only, scripted (dpt-tui
    computes the token loss).

`python gpt.py reference MODEL.pt DATA_DIR BLOCK BATCH STEPS SPEC_JSON`
    Trains MODEL.pt on DATA_DIR/train.bin (uint16 tokens) as nanoGPT's train.py does, on a file
    of exactly BLOCK + 1 tokens (every window is the one window, so the order of windows cannot
    matter): AdamW (decay on 2-D tensors only, as nanoGPT's configure_optimizers), a linear
    warm-up then cosine to min_lr (as LinearLR then CosineAnnealingLR), clip_grad_norm_. SPEC_JSON: {"lr", "min_lr", "warmup",
    "weight_decay", "betas", "eps", "clip"}. Prints the final parameters as JSON.

`python gpt.py bench DATA_DIR VOCAB BLOCK WIDTH LAYERS HEADS BATCH WARMUP STEPS DEVICE f32|bf16 RECIPE_JSON [THREADS]`
    The plain PyTorch loop `dpt-tui bench` compares with, as an expert writes it: the eager
    model on DEVICE, windows of DATA_DIR/train.bin drawn as nanoGPT's get_batch draws them,
    fused AdamW with nanoGPT's decay groups, clip_grad_norm_, TF32 on, and for bf16 the forward
    under torch.autocast. RECIPE_JSON: {"lr", "betas", "weight_decay", "clip"}, the recipe the
    bench gives dpt-tui's side too (its `GPT_RECIPE`). Times STEPS steps after WARMUP and prints
    one JSON line: samples_per_sec, tokens_per_sec, ms_per_step, peak_mib, and flops_per_sample
    (one window's forward, as FlopCounterMode counts it).

`python gpt.py memory MODEL.pt DATA_DIR BLOCK BATCH STEPS THREADS`
    PyTorch's plain loop on the TorchScript file MODEL.pt on the CPU, as dpt-tui trains it (fused
    AdamW, weight decay 0, then one evaluation batch); prints peak_mib, the peak resident memory.
"""
import json
import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        # Without bias, as nanoGPT's bias=False: the keys' bias has no gradient in exact
        # arithmetic (softmax ignores what it adds to every key's score), so Adam would turn its
        # rounding noise into full-size steps and no two programs could agree on it.
        self.c_attn = nn.Linear(width, 3 * width, bias=False)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab: int, block: int, width: int = 32, layers: int = 2, heads: int = 2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def logits(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def forward(self, idx, targets):
        logits = self.logits(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


class LogitsOnly(nn.Module):
    def __init__(self, gpt: Gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx):
        return self.gpt.logits(idx)


def make(out, vocab, block, kind, width=32, layers=2, heads=2):
    torch.manual_seed(0)
    gpt = Gpt(vocab, block, width, layers, heads).eval()
    if kind == "script":
        module = torch.jit.script(gpt)
    elif kind == "trace":
        idx = torch.randint(0, vocab, (2, block))
        module = torch.jit.trace(gpt, (idx, idx))
    elif kind == "logits":
        module = torch.jit.script(LogitsOnly(gpt))
    else:
        raise SystemExit(f"unknown kind {kind}")
    module.save(out)


def lr_at(step, steps, spec):
    """Linear warm-up over `warmup` steps (LinearLR(start_factor=1/W, total_iters=W-1)), then
    cosine to min_lr over the rest (CosineAnnealingLR(T_max=T-W, eta_min=min_lr))."""
    w = spec["warmup"]
    if step < w:
        return spec["lr"] * (step + 1) / w
    ratio = min(1.0, (step - w) / max(1, steps - w))
    return spec["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (spec["lr"] - spec["min_lr"])


def reference(model, data, block, batch, steps, spec):
    torch.set_num_threads(1)
    net = torch.jit.load(model)
    net.train()
    import numpy as np
    tokens = torch.from_numpy(np.fromfile(f"{data}/train.bin", dtype=np.uint16).astype(np.int64))
    assert len(tokens) == block + 1, "a corpus of one window"
    x = tokens[:block].repeat(batch, 1)
    y = tokens[1:].repeat(batch, 1)
    named = [(k, p) for k, p in net.named_parameters() if p.requires_grad]
    decay = [p for _, p in named if p.dim() >= 2]
    rest = [p for _, p in named if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": spec["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"])
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, spec)
        opt.zero_grad(set_to_none=True)
        # spec["autocast"]: the forward in that format, as torch.autocast runs it; the backward
        # outside, the weights and the update in float32.
        low = {"bf16": torch.bfloat16, "f16": torch.float16}.get(spec.get("autocast"))
        with torch.autocast("cpu", dtype=low or torch.bfloat16, enabled=low is not None):
            _, loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], spec["clip"])
        opt.step()
    print(json.dumps({k: p.detach().flatten().tolist() for k, p in net.named_parameters()}))


def draw_windows(tokens, block, batch):
    """`batch` windows of `block` tokens and their next tokens, drawn as nanoGPT's get_batch does."""
    ix = torch.randint(len(tokens) - block - 1, (batch,))
    x = torch.stack([tokens[i:i + block].long() for i in ix])
    y = torch.stack([tokens[i + 1:i + 1 + block].long() for i in ix])
    return x, y


def bench(data, vocab, block, width, layers, heads, batch, warmup, steps, device, precision, recipe,
          threads=None, module=None):
    """PyTorch's loop on the GPT: the eager `Gpt` module, or with `module` the TorchScript file
    (as `make` wrote it, the same seeded weights) through the TorchScript interpreter without its
    graph optimizations, as dpt-tui runs it; prints the figures as JSON."""
    import resource
    import time
    from torch.utils.flop_counter import FlopCounterMode
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    if module:
        # What `torch.jit.optimized_execution(False)` sets, for the whole loop.
        torch._C._set_graph_executor_optimize(False)
        model = torch.jit.load(module, map_location=dev)
    else:
        model = Gpt(vocab, block, width, layers, heads).to(dev)
    # Read with torch alone: a GPU node's bare Python may have torch without NumPy.
    path = f"{data}/train.bin"
    tokens = torch.from_file(path, shared=False, size=os.path.getsize(path) // 2, dtype=torch.uint16)

    def window_batch():
        x, y = draw_windows(tokens, block, batch)
        if dev.type == "cuda":
            return x.pin_memory().to(dev, non_blocking=True), y.pin_memory().to(dev, non_blocking=True)
        return x, y

    x, y = window_batch()
    model.eval()
    # Attention on the math kernel for the count: FlopCounterMode has no formula for the CPU's
    # fused attention kernel, and the math one does the same matrix products.
    math = torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)
    with torch.no_grad(), math, FlopCounterMode(display=False) as counter:
        model(x[:1], y[:1])
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": recipe["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=recipe["lr"], betas=tuple(recipe["betas"]), fused=True)

    def step():
        x, y = window_batch()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = time.perf_counter() - start
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    samples = batch * steps / seconds
    print(json.dumps({"samples_per_sec": samples, "tokens_per_sec": samples * block,
                      "ms_per_step": 1e3 * seconds / steps, "peak_mib": peak,
                      "flops_per_sample": counter.get_total_flops(), "device": str(dev),
                      "threads": torch.get_num_threads()}))


def memory(model_path, data, block, batch, steps, threads):
    """PyTorch's plain loop on a TorchScript file, as dpt-tui trains it: fused AdamW (weight
    decay 0), `steps` steps of `batch` windows and one evaluation batch; prints the peak resident
    memory in MiB (the reference of BENCHMARKS' "Memory against PyTorch's loop")."""
    import resource
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.jit.load(model_path)
    path = f"{data}/train.bin"
    tokens = torch.from_file(path, shared=False, size=os.path.getsize(path) // 2, dtype=torch.uint16)

    def window_batch():
        return draw_windows(tokens, block, batch)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    model.train()
    for _ in range(steps):
        x, y = window_batch()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        model(*window_batch())
    print(json.dumps({"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    if sys.argv[1] == "bench":
        ints = list(map(int, sys.argv[3:11]))
        threads = int(sys.argv[14]) if len(sys.argv) > 14 else None
        module = sys.argv[15] if len(sys.argv) > 15 else None
        bench(sys.argv[2], *ints, sys.argv[11], sys.argv[12], json.loads(sys.argv[13]), threads, module)
    elif sys.argv[1] == "memory":
        memory(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8]))
    elif sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], *map(int, sys.argv[6:9]))
    elif sys.argv[1] == "reference":
        block, batch, steps = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        reference(sys.argv[2], sys.argv[3], block, batch, steps, json.loads(sys.argv[7]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
