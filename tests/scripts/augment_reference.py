"""torchvision's own crop and flip on the first N training images of an IDX data set, for the
draws dpt-tui made: `python augment_reference.py DATA_DIR N PADDING DRAWS_JSON` prints the
augmented images' bytes as JSON, and the range of offsets `RandomCrop.get_params` draws.

DRAWS_JSON: [[top, left, flip], ...], one per image. Each image goes through
`transforms.v2.functional`'s pad (zeros on every side), crop at (top, left) of the image's own
size, and horizontal_flip when flip is set: what `RandomCrop(size, padding=P)` followed by
`RandomHorizontalFlip()` do with those draws.
"""
import json
import os
import sys

import torch
from torchvision.transforms import RandomCrop
from torchvision.transforms.v2 import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "pytorch"))
from seed_models import read_idx  # noqa: E402


def main():
    data, n, pad, draws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    images = read_idx(f"{data}/train-images-idx3-ubyte.gz")[:n].unsqueeze(1)
    h, w = images.shape[-2:]
    out = []
    for img, (top, left, flip) in zip(images, draws):
        x = F.crop(F.pad(img, [pad]), top, left, h, w)
        if flip:
            x = F.horizontal_flip(x)
        out.extend(x.flatten().tolist())
    torch.manual_seed(0)
    padded = F.pad(images[0], [pad])
    corners = [RandomCrop.get_params(padded, (h, w))[:2] for _ in range(2000)]
    offsets = [c for pair in corners for c in pair]
    print(json.dumps({"bytes": out, "min": min(offsets), "max": max(offsets)}))


if __name__ == "__main__":
    main()
