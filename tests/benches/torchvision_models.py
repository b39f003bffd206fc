"""torchvision and timm classifiers for the DDP comparison, taking Fashion-MNIST's 1x28x28
images: `python torchvision_models.py NAME OUT.pt` writes NAME (resnet18, mobilenet_v3_small,
efficientnet_b0 from torchvision; timm/vit_tiny_patch16_224 and timm/regnetx_002 from timm)
scripted from its Python module, with 10 classes; `build(NAME)` is the same module for the
Python side. torchvision's models get the gray channel repeated to the 3 they take; timm's are
made with one input channel (`in_chans=1`), the ViT with 4x4 patches of the 28x28 image.
"""
import sys

import torch
from torch import nn
import torchvision

MODELS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0")
TIMM = ("timm/vit_tiny_patch16_224", "timm/regnetx_002")


class Gray(nn.Module):
    """Repeats a 1-channel image to 3 channels, then runs `net`."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x.expand(-1, 3, -1, -1))


def build(name: str) -> nn.Module:
    if name not in MODELS + TIMM:
        raise SystemExit(f"unknown model {name}; use one of {', '.join(MODELS + TIMM)}")
    torch.manual_seed(0)
    if name in TIMM:
        import timm

        arch = name.split("/", 1)[1]
        extra = {"img_size": 28, "patch_size": 4} if arch.startswith("vit") else {}
        return timm.create_model(arch, num_classes=10, in_chans=1, **extra)
    return Gray(getattr(torchvision.models, name)(num_classes=10))


if __name__ == "__main__":
    torch.jit.script(build(sys.argv[1])).save(sys.argv[2])
