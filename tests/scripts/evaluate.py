"""Loads a TorchScript model dpt-tui trained and prints its test accuracy on IDX data as JSON:
`python evaluate.py MODEL.pt DATA_DIR [MEAN STD]`. The check that the exported file is the
trained model: the accuracy must match the one dpt-tui reported.
"""
import gzip
import json
import sys

import torch


def read_idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndims)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndims:]), dtype=torch.uint8).reshape(dims)


def main():
    model, data = sys.argv[1], sys.argv[2]
    mean, std = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (0.0, 1.0)
    net = torch.jit.load(model)
    net.eval()
    x = read_idx(f"{data}/t10k-images-idx3-ubyte.gz").unsqueeze(1).float()
    y = read_idx(f"{data}/t10k-labels-idx1-ubyte.gz").long()
    with torch.no_grad():
        out = net((x / 255 - mean) / std)
    print(json.dumps({"test_acc": (out.argmax(1) == y).float().mean().item(), "samples": len(y)}))


if __name__ == "__main__":
    main()
