"""The PyTorch side of `cargo bench --bench loader`.

make DIR N W H: writes N JPEG images (quality 90) of W x H pixels into DIR/train/<class>/ and a
tenth as many into DIR/val/<class>/, 10 classes, random gradients with grain (seeded).
load DIR WORKERS BATCH SIZE: one epoch of torchvision's ImageFolder with RandomResizedCrop(SIZE)
+ RandomHorizontalFlip + PILToTensor (uint8, as dpt-tui's loader hands over) through a
DataLoader (WORKERS worker processes, pinned memory, shuffled); prints {"images_per_sec": ...}.
train DIR WORKERS BATCH SIZE: the same loader feeding a linear layer on 4x4 average pools (SGD,
one intra-op thread), one epoch; prints {"images_per_sec": ...}.
"""
import json
import os
import sys
import time

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.nn import functional as F
from torchvision import datasets, transforms


def make(folder, n, w, h):
    rng = np.random.default_rng(0)
    for split, count in (("train", n), ("val", max(n // 10, 10))):
        for i in range(count):
            c = i % 10
            path = os.path.join(folder, split, f"class_{c}")
            os.makedirs(path, exist_ok=True)
            # Smooth content (a few random gradients), so JPEG sizes are photo-like, not noise.
            y, x = np.mgrid[0:h, 0:w].astype(np.float32)
            planes = [
                127 + 120 * np.sin(x / rng.uniform(8, 60) + rng.uniform(0, 6))
                * np.cos(y / rng.uniform(8, 60) + rng.uniform(0, 6))
                for _ in range(3)
            ]
            # Plus grain, so the files are near photo size (about 70 KB at 400x300; ImageNet's
            # average is about 110 KB at about 400x350) and decode about as slowly.
            img = (np.stack(planes, -1) + rng.normal(0, 30, (h, w, 3))).clip(0, 255).astype(np.uint8)
            Image.fromarray(img).save(os.path.join(path, f"{i:06}.jpg"), quality=90)


def loader(folder, workers, batch, size):
    tf = transforms.Compose(
        [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.PILToTensor()]
    )
    data = datasets.ImageFolder(os.path.join(folder, "train"), tf)
    return len(data), torch.utils.data.DataLoader(
        data, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=True, persistent_workers=False
    )


def main():
    mode = sys.argv[1]
    if mode == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    folder, workers, batch, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n, dl = loader(folder, workers, batch, size)
    model = nn.Linear(3 * 16, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    seen = 0
    for x, y in dl:
        seen += len(y)
        if mode == "train":
            x = (x.float() / 255 - 0.5) / 0.25
            loss = F.cross_entropy(model(F.adaptive_avg_pool2d(x, 4).flatten(1)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    secs = time.perf_counter() - start
    print(json.dumps({"images_per_sec": seen / secs, "images": seen, "seconds": secs}))


if __name__ == "__main__":
    main()
