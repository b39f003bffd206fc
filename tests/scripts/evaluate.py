"""Loads a TorchScript model dpt-tui trained and prints its test accuracy on IDX data as JSON:
`python evaluate.py MODEL.pt DATA_DIR [MEAN STD [LIMIT]]` (LIMIT: the first test samples only).
The check that the exported file is the trained model: the accuracy must match the one dpt-tui
reported. Also prints the top-5 accuracy and the confusion counts (rows: labels, columns:
predictions), PyTorch's figures for dpt-tui's evaluation breakdown.
"""
import json
import os
import sys

import torch

# The IDX reader of the benchmark's PyTorch side, one home for it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "pytorch"))
from seed_models import read_idx  # noqa: E402


def main():
    model, data = sys.argv[1], sys.argv[2]
    mean, std = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (0.0, 1.0)
    limit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    net = torch.jit.load(model)
    net.eval()
    x = read_idx(f"{data}/t10k-images-idx3-ubyte.gz").unsqueeze(1).float()[:limit]
    y = read_idx(f"{data}/t10k-labels-idx1-ubyte.gz").long()[:limit]
    with torch.no_grad():
        out = net((x / 255 - mean) / std)
    classes = out.shape[1]
    top5 = (out.topk(min(5, classes), 1).indices == y.unsqueeze(1)).any(1).float().mean().item()
    confusion = torch.zeros(classes, classes, dtype=torch.long)
    confusion.index_put_((y, out.argmax(1)), torch.ones_like(y), accumulate=True)
    print(json.dumps({
        "test_acc": (out.argmax(1) == y).float().mean().item(),
        "samples": len(y),
        "top5_acc": top5,
        "confusion": confusion.tolist(),
    }))


if __name__ == "__main__":
    main()
