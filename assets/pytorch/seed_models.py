"""The seeds' PyTorch training code, for dpt-tui's comparison benchmark.

Mirrors seed 001 (from-scratch LeNet, summed loss, sgd(params, lr, batch_size)), seed 002
(d2l's ResNet-18, CrossEntropyLoss, torch.optim.SGD) and seed 004 (the MNIST example Net, SGD
with momentum 0.5, NLL loss), with the same initialization, batch size and learning rate. The
data set is held in memory as tensors (no DataLoader), normalized once and resident on the device,
so the comparison is of the training step against PyTorch as an expert writes it: on GPUs with
cudnn.benchmark, TF32, and channels-last for ResNet-18. Several GPUs are compared through
DistributedDataParallel over NCCL, one process per GPU, started by torchrun (`--ddp`): each rank
trains on its share of the global batch, the gradients averaged by DDP's bucketed allreduce.
Prints one JSON line (rank 0): samples_per_sec, sec_per_epoch, test_acc.

With `--steps N` (how `dpt-tui bench` runs it) it trains `--warmup W` steps, then times N more
(cycling through the data, no evaluation) and prints samples_per_sec, ms_per_step, the peak
memory (the caching allocator's on a GPU, the process's resident set on the CPU) and the
forward FLOPs per sample as torch.utils.flop_counter.FlopCounterMode counts them.
`--precision bf16` trains under torch.autocast(dtype=torch.bfloat16); `--batch-size` overrides
the seed's batch.

python3 seed_models.py --model lenet --data /usr/share/datasets/fashion-mnist --epochs 1
python3 -m torch.distributed.run --standalone --nproc-per-node 8 seed_models.py --ddp --model resnet18
python3 seed_models.py --model resnet18 --data DIR --steps 40 --warmup 10 --precision bf16
"""
import os
import argparse
import gzip
import json
import time

import torch
from torch import nn
from torch.nn import functional as F


def read_idx(path):
    if not os.path.exists(path) and path.endswith(".gz"):
        path = path[:-3]
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndims)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndims:]), dtype=torch.uint8).reshape(dims)


def load(data_dir, prefix, limit):
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz")
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").long()
    if limit is not None and limit < len(y):
        # The samples dpt-tui's --train-limit/--test-limit keep: spread evenly over the set.
        picked = torch.tensor([i * len(y) // limit for i in range(limit)])
        x, y = x[picked], y[picked]
    return x.unsqueeze(1), y


# Seed 001: LeNet from scratch.
def lenet_params(device):
    scale = 0.01
    params = [torch.randn(20, 1, 3, 3) * scale, torch.zeros(20), torch.randn(50, 20, 5, 5) * scale,
              torch.zeros(50), torch.randn(800, 128) * scale, torch.zeros(128),
              torch.randn(128, 10) * scale, torch.zeros(10)]
    return [p.to(device).requires_grad_() for p in params]


def lenet(X, params):
    h1 = F.avg_pool2d(F.relu(F.conv2d(X, params[0], params[1])), (2, 2), (2, 2))
    h2 = F.avg_pool2d(F.relu(F.conv2d(h1, params[2], params[3])), (2, 2), (2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3 = F.relu(torch.mm(h2, params[4]) + params[5])
    return torch.mm(h3, params[6]) + params[7]


class LenetModule(nn.Module):
    """Seed 001's tensors as a module, so that DDP can wrap them."""

    def __init__(self, device):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p.detach()) for p in lenet_params(device)])

    def forward(self, X):
        return lenet(X, list(self.params))


# Seed 002: d2l's ResNet-18.
class Residual(nn.Module):
    def __init__(self, cin, cout, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv3 = nn.Conv2d(cin, cout, 1, stride=strides) if use_1x1conv else None
        self.bn1, self.bn2 = nn.BatchNorm2d(cout), nn.BatchNorm2d(cout)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes=10):
    def block(cin, cout, n, first=False):
        return nn.Sequential(*[Residual(cin, cout, True, 2) if i == 0 and not first else Residual(cout, cout)
                               for i in range(n)])
    net = nn.Sequential(nn.Conv2d(1, 64, 3, stride=1, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                        block(64, 64, 2, True), block(64, 128, 2), block(128, 256, 2), block(256, 512, 2),
                        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(512, num_classes))

    def init(m):
        if type(m) in [nn.Linear, nn.Conv2d]:
            nn.init.normal_(m.weight, std=0.01)
    net.apply(init)
    return net


# Seed 004: the MNIST example network.
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.dropout = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.dropout(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def peak_mib(dev):
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev) / 2**20
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_steps(a, dev, world, rank, module, xtr, ytr, batch, train_step, sync):
    """--steps: warm-up steps, then timed ones, cycling through the data in order."""
    from torch.utils.flop_counter import FlopCounterMode
    module.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(xtr[:1])
    module.train()
    n = xtr.shape[0]
    share = batch // world
    at = 0

    def step():
        nonlocal at
        if at + batch > n:
            at = 0
        lo = at + rank * share
        train_step(xtr[lo:lo + share], ytr[lo:lo + share], batch)
        at += batch

    for _ in range(a.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"samples_per_sec": batch * a.steps / seconds, "ms_per_step": 1e3 * seconds / a.steps,
                          "peak_mib": peak_mib(dev), "flops_per_sample": counter.get_total_flops(),
                          "device": str(dev), "processes": world, "threads": torch.get_num_threads()}))
    if a.ddp:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet", choices=["lenet", "resnet18", "mnist-net"])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--test-limit", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ddp", action="store_true", help="one rank of a torchrun job (NCCL on GPUs, else Gloo)")
    ap.add_argument("--steps", type=int, default=None, help="time this many steps after --warmup (no epochs)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rank, world = 0, 1
    dev = torch.device(a.device)
    if a.ddp:
        import torch.distributed as dist
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if dev.type == "cuda":
            dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    channels_last = dev.type == "cuda" and a.model == "resnet18"
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    mean, std = (0.1307, 0.3081) if a.model == "mnist-net" else (0.0, 1.0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    def resident(x):
        # Normalized once, on the device, in the layout the model runs in.
        return ((x.to(dev).float() / 255 - mean) / std).contiguous(memory_format=fmt)

    xtr, ytr = load(a.data, "train", a.train_limit)
    xte, yte = load(a.data, "t10k", a.test_limit)
    xtr, ytr, xte, yte = resident(xtr), ytr.to(dev), resident(xte), yte.to(dev)
    batch, lr = {"lenet": (256, 0.2), "resnet18": (256, 0.1), "mnist-net": (64, 0.01)}[a.model]
    batch = a.batch_size or batch
    # Every rank starts from the same weights (DDP also broadcasts rank 0's at wrap time).
    torch.manual_seed(a.seed)
    module = {"lenet": lambda: LenetModule(dev), "resnet18": resnet18, "mnist-net": Net}[a.model]().to(dev)
    module = module.to(memory_format=fmt)
    net = module
    if a.ddp:
        net = nn.parallel.DistributedDataParallel(module, device_ids=[dev.index] if dev.type == "cuda" else None)
    if a.model == "lenet":
        # Seed 001's sgd(params, lr, batch_size) on a summed loss; DDP averages the ranks'
        # sums, so the step scales by the rank count to divide the global sum by the batch.
        opt = torch.optim.SGD(module.parameters(), lr=lr * world / batch)
    else:
        opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.5 if a.model == "mnist-net" else 0.0)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def train_step(X, y, n):
        if a.model == "lenet":
            opt.param_groups[0]["lr"] = lr * world / n
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = net(X)
            if a.model == "lenet":
                l = F.cross_entropy(out, y, reduction="sum")
            elif a.model == "mnist-net":
                l = F.nll_loss(out, y)
            else:
                l = F.cross_entropy(out, y)
        l.backward()
        opt.step()

    if a.steps is not None:
        return timed_steps(a, dev, world, rank, module, xtr, ytr, batch, train_step, sync)

    n, seconds, test_acc = xtr.shape[0], 0.0, 0.0
    for epoch in range(a.epochs):
        module.train()
        sync()
        t = time.perf_counter()
        # The same permutation on every rank (seeded by epoch); each takes its slice of a batch.
        g = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        order = torch.randperm(n, generator=g).to(dev)
        for i in range(0, n, batch):
            whole = order[i:i + batch]
            idx = torch.tensor_split(whole, world)[rank]
            train_step(xtr[idx], ytr[idx], whole.shape[0])
        sync()
        seconds += time.perf_counter() - t
        module.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, xte.shape[0], 1000):
                correct += (module(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        test_acc = correct / xte.shape[0]
    if rank == 0:
        print(json.dumps({"samples_per_sec": n * a.epochs / seconds, "sec_per_epoch": seconds / a.epochs,
                          "test_acc": test_acc, "threads": torch.get_num_threads(), "device": str(dev),
                          "processes": world}))
    if a.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
