"""PyTorch's own FLOP counts for tests/flops.rs: FlopCounterMode's total for each of its
models, on the same shapes, one `name total` line each; and the TorchScript module of its last
test, scripted and saved to `<dir>/tiny.pt` (the folder given as the one argument).

Attention is counted on the math backend: FlopCounterMode counts the fused kernels (flash,
memory-efficient, cuDNN) by formula, but the CPU's own flash kernel, which the default CPU
backend picks, not at all; the math path's two bmm give the formula's number.
"""

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def flops(f, *args) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as mode:
        f(*args)
    return mode.get_total_flops()


def linear_stack():
    first, second = nn.Linear(16, 32), nn.Linear(32, 8, bias=False)
    tokens = torch.randn(3, 5, 16)  # [B, T, C], as a GPT's
    rows = torch.randn(4, 16)
    second(torch.relu(first(tokens)))
    first(rows)


def lenet():
    conv1, conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
    fc1, fc2 = nn.Linear(256, 120), nn.Linear(120, 10)
    x = torch.randn(2, 1, 28, 28)
    x = F.max_pool2d(torch.relu(conv1(x)), 2)
    x = F.max_pool2d(torch.relu(conv2(x)), 2)
    fc2(torch.relu(fc1(x.flatten(1))))


def transposed_convolution():
    up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
    up(torch.randn(2, 4, 5, 5))


def batched_products():
    a, b, c = torch.randn(4, 3, 5), torch.randn(4, 5, 7), torch.randn(4, 3, 7)
    torch.bmm(a, b)
    torch.baddbmm(c, a, b)
    torch.matmul(torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6))


def attention():
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 12)
    F.scaled_dot_product_attention(q, k, v)


class Tiny(nn.Module):
    """A convolution, a linear layer on [B, T, C], attention and a batched product."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.proj = nn.Linear(4, 8)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(2).transpose(1, 2)  # [B, T, 4]
        h = self.proj(h)  # [B, T, 8]
        b, t = h.size(0), h.size(1)
        q = h.view(b, t, 2, 4).transpose(1, 2)  # [B, 2, T, 4]
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return torch.bmm(a.transpose(1, 2).reshape(b, t, 8), h.transpose(1, 2))


def main():
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    for name, f in [
        ("linear_stack", linear_stack),
        ("lenet", lenet),
        ("transposed_convolution", transposed_convolution),
        ("batched_products", batched_products),
        ("attention", attention),
    ]:
        print(name, flops(f))
    tiny = torch.jit.script(Tiny())
    tiny.save(str(out / "tiny.pt"))
    print("script_forward", flops(tiny, torch.randn(2, 1, 8, 8)))


if __name__ == "__main__":
    main()
