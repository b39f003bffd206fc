"""The Python original under DistributedDataParallel, for the DDP comparison: run under
`torchrun --nproc-per-node 2 ddp_reference.py NAME DATA_DIR N BATCH`; trains one epoch of the
first N training images of an IDX data set with the global batch BATCH split over the ranks
(DistributedSampler, shuffled), SGD lr 0.05 momentum 0.9 (dpt-tui's defaults for a TorchScript
model), inputs normalized by the training set's statistics, one intra-op thread per process,
Gloo. Rank 0 prints {"samples_per_sec": ...}: the epoch's samples over its wall time.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "pytorch"))
from seed_models import load  # noqa: E402
from torchvision_models import build  # noqa: E402


def main():
    name, data, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # The samples dpt-tui's --train-limit keeps.
    x, y = load(data, "train", n)
    x = x.float() / 255
    x = (x - x.mean()) / x.std()
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch // world, sampler=sampler)
    model = DistributedDataParallel(build(name))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    dist.barrier()
    start = time.perf_counter()
    for xb, yb in loader:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"samples_per_sec": n / seconds}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
