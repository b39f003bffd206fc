"""The seeds' PyTorch training code, for dpt-tui's comparison benchmark.

Mirrors seed 001 (from-scratch LeNet, summed loss, sgd(params, lr, batch_size)), seed 002
(d2l's ResNet-18, CrossEntropyLoss, torch.optim.SGD) and seed 004 (the MNIST example Net, SGD
with momentum 0.5, NLL loss), with the same initialization, batch size and learning rate. The
data set is held in memory as tensors (no DataLoader), as dpt-tui holds it, so the comparison is
of the training step. Prints one JSON line: samples_per_sec, sec_per_epoch, test_acc.

python3 pytorch_seed.py --model lenet --data /usr/share/datasets/fashion-mnist --epochs 1
"""
import argparse
import gzip
import json
import time

import torch
from torch import nn
from torch.nn import functional as F


def read_idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndims)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndims:]), dtype=torch.uint8).reshape(dims)


def load(data_dir, prefix, limit):
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz")[:limit]
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz")[:limit].long()
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet", choices=["lenet", "resnet18", "mnist-net"])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--test-limit", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    xtr, ytr = load(a.data, "train", a.train_limit)
    xte, yte = load(a.data, "t10k", a.test_limit)
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    mean, std = (0.1307, 0.3081) if a.model == "mnist-net" else (0.0, 1.0)
    norm = lambda x: (x.float() / 255 - mean) / std
    batch, lr = {"lenet": (256, 0.2), "resnet18": (256, 0.1), "mnist-net": (64, 0.01)}[a.model]

    if a.model == "lenet":
        params = lenet_params(dev)
        forward, module = (lambda X: lenet(X, params)), None
    else:
        module = (resnet18() if a.model == "resnet18" else Net()).to(dev)
        forward = module
        opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.5 if a.model == "mnist-net" else 0.0)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    n, seconds, test_acc = xtr.shape[0], 0.0, 0.0
    for _ in range(a.epochs):
        if module is not None:
            module.train()
        sync()
        t = time.perf_counter()
        order = torch.randperm(n, device=dev)
        for i in range(0, n, batch):
            idx = order[i:i + batch]
            X, y = norm(xtr[idx]), ytr[idx]
            if a.model == "lenet":
                l = F.cross_entropy(forward(X), y, reduction="none").sum()
                l.backward()
                with torch.no_grad():
                    for p in params:
                        p -= lr * p.grad / X.shape[0]
                        p.grad.zero_()
            else:
                opt.zero_grad()
                out = forward(X)
                l = F.nll_loss(out, y) if a.model == "mnist-net" else F.cross_entropy(out, y)
                l.backward()
                opt.step()
        sync()
        seconds += time.perf_counter() - t
        if module is not None:
            module.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, xte.shape[0], 1000):
                correct += (forward(norm(xte[i:i + 1000])).argmax(1) == yte[i:i + 1000]).sum().item()
        test_acc = correct / xte.shape[0]
    print(json.dumps({"samples_per_sec": n * a.epochs / seconds, "sec_per_epoch": seconds / a.epochs,
                      "test_acc": test_acc, "threads": torch.get_num_threads(), "device": str(dev)}))


if __name__ == "__main__":
    main()
