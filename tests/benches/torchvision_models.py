"""torchvision classifiers for the DDP comparison, taking Fashion-MNIST's 1x28x28 images:
`python torchvision_models.py NAME OUT.pt` writes NAME (resnet18, mobilenet_v3_small,
efficientnet_b0) scripted from its Python module, with 10 classes; `build(NAME)` is the same
module for the Python side. The gray channel is repeated to the 3 the models take.
"""
import sys

import torch
from torch import nn
import torchvision

MODELS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0")


class Gray(nn.Module):
    """Repeats a 1-channel image to 3 channels, then runs `net`."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x.expand(-1, 3, -1, -1))


def build(name: str) -> nn.Module:
    if name not in MODELS:
        raise SystemExit(f"unknown model {name}; use one of {', '.join(MODELS)}")
    torch.manual_seed(0)
    return Gray(getattr(torchvision.models, name)(num_classes=10))


if __name__ == "__main__":
    torch.jit.script(build(sys.argv[1])).save(sys.argv[2])
