"""Array data whose targets are not class ids, for dpt-tui's tests, and PyTorch's own loop on it.

`python array_targets.py make DIR regression|masks`
    regression: DIR/data.npz with x_train [64, 6, 6] and x_test [16, 6, 6] float32 inputs and
    y_* [N, 2] float32 targets (a fixed linear map of the inputs plus noise); DIR/model.pt, a
    scripted forward(x, y) -> (pred, mse_loss(pred, y)) of one linear layer.
    masks: the same inputs with y_* [N, 6, 6] int64 masks (1 where the input is above 0.5);
    DIR/model.pt, a 3x3 convolution to 2 channels with forward(x, y) -> (logits,
    cross_entropy(logits, y)) per pixel.

`python array_targets.py one OUT.pt`
    A scripted one-input model (forward(x) -> predictions) of the regression's shape: one that
    does not compute its loss.

`python array_targets.py reference DIR STEPS LR`
    Loads DIR/model.pt and trains it on the whole training set per step (torch.optim.SGD, no
    momentum, no decay) for STEPS steps; prints the parameters by name as JSON.
"""
import json
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(36, 2)

    def forward(self, x, y):
        pred = self.fc(x.flatten(1))
        return pred, F.mse_loss(pred, y)


class Predictor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(36, 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x, y):
        logits = self.conv(x)
        return logits, F.cross_entropy(logits, y)


def make(out, kind):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = {s: rng.random((n, 6, 6), dtype=np.float32) for s, n in [("train", 64), ("test", 16)]}
    if kind == "regression":
        w = rng.standard_normal((36, 2)).astype(np.float32) / 6
        y = {s: (v.reshape(len(v), 36) @ w + 0.01 * rng.standard_normal((len(v), 2))).astype(np.float32) for s, v in x.items()}
        model = Regressor()
    else:
        y = {s: (v > 0.5).astype(np.int64) for s, v in x.items()}
        model = Segmenter()
    np.savez(f"{out}/data.npz", x_train=x["train"], y_train=y["train"], x_test=x["test"], y_test=y["test"])
    torch.jit.script(model).save(f"{out}/model.pt")


def reference(out, steps, lr):
    torch.set_num_threads(1)
    model = torch.jit.load(f"{out}/model.pt")
    data = np.load(f"{out}/data.npz")
    # dpt-tui gives the model [N, C, H, W] inputs: one channel here.
    x = torch.from_numpy(data["x_train"]).unsqueeze(1)
    y = torch.from_numpy(data["y_train"])
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
    print(json.dumps({n: p.detach().reshape(-1).tolist() for n, p in model.named_parameters()}))


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "one":
        torch.jit.script(Predictor()).save(sys.argv[2])
    elif sys.argv[1] == "reference":
        reference(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
