"""torchvision's RandomResizedCrop and evaluation resize + centre crop, for dpt-tui's tests:
`python resized_crop_reference.py CASES_JSON IMAGE_DIR` prints JSON.

CASES_JSON: {"params": [[height, width, [u, u, ...]], ...], "images": [[file, top, left, h, w, size], ...]}.
For each params case, `RandomResizedCrop.get_params` runs with torch's random draws replaced by
the given numbers in [0, 1), in the order it asks for them: a uniform_(a, b) draw is
a + (b - a) * u in float32 (as torch's kernel computes it), randint(0, n) is floor(u * n).
For each image, `F.resized_crop` (PIL, bilinear) of the region to size x size, and
`CenterCrop(size)(Resize(size / 0.875)(img))`, as uint8 [C, H, W] lists.
"""
import json
import math
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import functional as F


class Draws:
    def __init__(self, numbers):
        self.numbers = list(numbers)

    def next(self):
        return self.numbers.pop(0)


def params(height, width, numbers):
    draws = Draws(numbers)
    real_empty, real_randint = torch.empty, torch.randint

    class Uniform:
        def uniform_(self, a, b):
            a, b = float(a), float(b)
            return torch.tensor([a + (b - a) * draws.next()], dtype=torch.float32)

    torch.empty = lambda *_a, **_k: Uniform()
    torch.randint = lambda low, high, size: torch.tensor([low + math.floor(draws.next() * (high - low))])
    try:
        img = Image.new("RGB", (width, height))
        return list(transforms.RandomResizedCrop.get_params(img, [0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0]))
    finally:
        torch.empty, torch.randint = real_empty, real_randint


def planes(img):
    return np.asarray(img.convert("RGB")).transpose(2, 0, 1).astype(int).tolist()


def main():
    cases, folder = json.loads(sys.argv[1]), sys.argv[2]
    out = {"params": [params(h, w, u) for h, w, u in cases["params"]], "crops": [], "evals": []}
    for name, top, left, h, w, size in cases["images"]:
        img = Image.open(f"{folder}/{name}")
        out["crops"].append(planes(F.resized_crop(img, top, left, h, w, [size, size])))
        evaluate = transforms.Compose([transforms.Resize(int(size / 0.875)), transforms.CenterCrop(size)])
        out["evals"].append(planes(evaluate(img)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
