"""PyTorch's own numbers for dpt-tui's optimizer tests: trains a TorchScript model with full-batch
steps on the first N training images of an IDX data set and prints the final parameters as JSON.

`python optim_reference.py MODEL.pt DATA_DIR N STEPS SPEC_JSON`

SPEC_JSON: {"optimizer": "sgd"|"adam"|"adamw", "lr", "momentum", "nesterov", "weight_decay",
"betas", "eps", "decay_all", "clip" (null or the max norm), "label_smoothing", "ema" (null or the
decay: timm's ModelEmaV2, `ema = decay * ema + (1 - decay) * model` after every step; printed
as "ema.<name>"), "loss_scale" (null or {"init", "interval"}: torch.amp.GradScaler on the
CPU with that init_scale and growth_interval, unscaled before clipping; the final scale printed
as "loss_scale"), "overflow_at" (steps whose scaled loss is made infinite, as an fp16 overflow
would)}. Adam and AdamW decay only tensors of 2+ dimensions unless
decay_all (two parameter groups, as timm builds them); SGD decays every tensor. The loss is
the mean cross-entropy of the batch, the images scaled to [0, 1] (dpt-tui's default for a
TorchScript model).
"""
import json
import os
import sys

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "pytorch"))
from seed_models import read_idx  # noqa: E402


def optimizer(spec, named):
    lr, wd = spec["lr"], spec["weight_decay"]
    if spec["optimizer"] == "sgd":
        return torch.optim.SGD(
            [p for _, p in named], lr=lr, momentum=spec["momentum"], nesterov=spec["nesterov"], weight_decay=wd
        )
    decay = [p for _, p in named if spec["decay_all"] or p.dim() >= 2]
    rest = [p for _, p in named if not (spec["decay_all"] or p.dim() >= 2)]
    groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
    kind = torch.optim.AdamW if spec["optimizer"] == "adamw" else torch.optim.Adam
    return kind(groups, lr=lr, betas=tuple(spec["betas"]), eps=spec["eps"])


def main():
    model, data, n, steps, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
    torch.set_num_threads(1)
    net = torch.jit.load(model)
    net.train()
    x = read_idx(f"{data}/train-images-idx3-ubyte.gz")[:n].unsqueeze(1).float() / 255
    y = read_idx(f"{data}/train-labels-idx1-ubyte.gz")[:n].long()
    named = [(k, p) for k, p in net.named_parameters() if p.requires_grad]
    opt = optimizer(spec, named)
    ema = {k: v.detach().clone() for k, v in net.state_dict().items()} if spec.get("ema") else None
    ls = spec.get("loss_scale")
    scaler = torch.amp.GradScaler("cpu", init_scale=ls["init"], growth_interval=ls["interval"]) if ls else None
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y, label_smoothing=spec["label_smoothing"])
        if scaler is not None:
            loss = scaler.scale(loss)
            if step in spec.get("overflow_at", []):
                loss = loss * float("inf")
        loss.backward()
        if scaler is not None:
            scaler.unscale_(opt)
        if spec["clip"] is not None:
            torch.nn.utils.clip_grad_norm_([p for _, p in named], spec["clip"])
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if ema is not None:
            d = spec["ema"]
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    ema[k].copy_(ema[k] * d + (1.0 - d) * v)
    out = {k: p.detach().flatten().tolist() for k, p in net.named_parameters()}
    if scaler is not None:
        out["loss_scale"] = [scaler.get_scale()]
    if ema is not None:
        out.update({f"ema.{k}": v.flatten().tolist() for k, v in ema.items()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
