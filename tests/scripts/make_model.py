"""Writes TorchScript models for dpt-tui's tests: `python make_model.py KIND OUT.pt`.

cnn: a small CNN with BatchNorm and dropout (scripted); cnn-nodrop: the same without dropout;
mlp: a traced MLP; pooled: a linear layer on 4x4 average pools (any image size); frozen-mlp: the same with its first layer frozen (requires_grad=False, the
usual fine-tuning export); and the bad ones: no-params (a module without parameters), wrong-shape
(returns [N, 10, 1]), few-classes (3 outputs), fails (forward raises on 28x28 inputs),
double (float64 weights); head-first: an MLP that declares its output layer before the layer
that feeds it (its gradients arrive in declared order, not the reverse).
"""
import sys

import torch
from torch import nn
from torch.nn import functional as F


class Cnn(nn.Module):
    def __init__(self, dropout: bool, channels: int = 1, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.25 if dropout else 0.0)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.drop(x))


class Mlp(nn.Module):
    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 64)
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class HeadFirst(nn.Module):
    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.head = nn.Linear(64, classes)
        self.body = nn.Linear(inputs, 64)

    def forward(self, x):
        return self.head(F.relu(self.body(x.flatten(1))))


class Pooled(nn.Module):
    """Averages any image down to 4x4 first: cheap whatever the images' size."""

    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(channels * 16, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(x, 4).flatten(1))


class Overlapping(nn.Module):
    """Two biases cut from one tensor so that they overlap: `low` and `high` share 5 values."""

    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 64)
        self.fc2 = nn.Linear(64, classes, bias=False)
        both = torch.zeros(classes + classes // 2)
        self.low = nn.Parameter(both[:classes])
        self.high = nn.Parameter(both[classes // 2 :])

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1)))) + self.low + self.high


class NoParams(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]


class WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        return self.mlp(x).unsqueeze(-1)


class Fails(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))


def main():
    kind, out = sys.argv[1], sys.argv[2]
    channels = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    side = 32 if channels == 3 else 28
    torch.manual_seed(0)
    if kind == "mlp":
        m = torch.jit.trace(Mlp(channels * side * side).eval(), torch.zeros(2, channels, side, side))
    elif kind == "frozen-mlp":
        net = Mlp(channels * side * side)
        for p in net.fc1.parameters():
            p.requires_grad_(False)
        m = torch.jit.script(net)
    elif kind == "pooled":
        m = torch.jit.script(Pooled(channels))
    elif kind in ("cnn", "cnn-nodrop"):
        m = torch.jit.script(Cnn(kind == "cnn", channels))
    elif kind == "no-params":
        m = torch.jit.script(NoParams())
    elif kind == "wrong-shape":
        m = torch.jit.script(WrongShape())
    elif kind == "few-classes":
        m = torch.jit.script(Mlp(classes=3))
    elif kind == "fails":
        m = torch.jit.script(Fails())
    elif kind == "head-first":
        m = torch.jit.script(HeadFirst(channels * side * side))
    elif kind == "overlapping":
        m = torch.jit.script(Overlapping(channels * side * side))
    elif kind == "double":
        m = torch.jit.script(Mlp().double())
    else:
        raise SystemExit(f"unknown kind {kind}")
    m.save(out)


if __name__ == "__main__":
    main()
