"""Writes the first N_TRAIN training and N_TEST test samples of Fashion-MNIST as gzipped IDX files.

Run from this folder: python3 make_subset.py [/usr/share/datasets/fashion-mnist]
"""
import gzip
import struct
import sys

N_TRAIN, N_TEST = 2000, 500
src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def subset(name, n):
    data = gzip.open(f"{src}/{name}.gz").read()
    ndims = data[3]
    dims = list(struct.unpack(f">{ndims}I", data[4:4 + 4 * ndims]))
    row = 1
    for d in dims[1:]:
        row *= d
    body = data[4 + 4 * ndims: 4 + 4 * ndims + n * row]
    header = data[:4] + struct.pack(f">{ndims}I", n, *dims[1:])
    # mtime=0 keeps the output byte-identical from run to run.
    with open(f"{name}.gz", "wb") as f:
        f.write(gzip.compress(header + body, mtime=0))


subset("train-images-idx3-ubyte", N_TRAIN)
subset("train-labels-idx1-ubyte", N_TRAIN)
subset("t10k-images-idx3-ubyte", N_TEST)
subset("t10k-labels-idx1-ubyte", N_TEST)
