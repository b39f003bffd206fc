"""PyTorch's fused optimizers on given tensors, for dpt-tui's test of its own fused steps.

`python fused_reference.py SPEC_JSON`

SPEC_JSON: {"optimizer": "sgd"|"adam"|"adamw", "lr", "momentum", "nesterov", "weight_decay",
"betas", "eps", "decay_all", "steps", "shapes" (the parameters' shapes), "frozen" (indices of
parameters that do not train)}. Draws the parameters and each step's gradients from
torch.manual_seed(0), runs `torch.optim.SGD/Adam/AdamW(fused=True)` with those gradients as
`.grad` (no `grad_scale`: dpt-tui's gradient is the batch's mean already), and prints
{"initial": [...], "grads": [[...] per step], "final": [...]}, each the tensors flattened and
concatenated in order. Adam and AdamW decay tensors of 2+ dimensions only unless decay_all (two
parameter groups); SGD decays every tensor.
"""
import json
import sys

import torch


def main():
    spec = json.loads(sys.argv[1])
    torch.manual_seed(0)
    params = [torch.randn(shape) for shape in spec["shapes"]]
    frozen = set(spec["frozen"])
    initial = torch.cat([p.flatten() for p in params])
    grads = [[torch.randn(p.shape) for p in params] for _ in range(spec["steps"])]
    train = [p.requires_grad_() for i, p in enumerate(params) if i not in frozen]
    lr, wd = spec["lr"], spec["weight_decay"]
    if spec["optimizer"] == "sgd":
        opt = torch.optim.SGD(train, lr=lr, momentum=spec["momentum"], nesterov=spec["nesterov"],
                              weight_decay=wd, fused=True)
    else:
        decays = [spec["decay_all"] or p.dim() >= 2 for p in train]
        groups = [{"params": [p for p, d in zip(train, decays) if d], "weight_decay": wd},
                  {"params": [p for p, d in zip(train, decays) if not d], "weight_decay": 0.0}]
        kind = torch.optim.AdamW if spec["optimizer"] == "adamw" else torch.optim.Adam
        opt = kind([g for g in groups if g["params"]], lr=lr, betas=tuple(spec["betas"]), eps=spec["eps"],
                   fused=True)
    for step in range(spec["steps"]):
        for i, p in enumerate(params):
            if i not in frozen:
                p.grad = grads[step][i].clone()
        opt.step()
    flat = lambda ts: [float(v) for v in torch.cat([t.detach().flatten() for t in ts]).tolist()]
    print(json.dumps({"initial": initial.tolist(), "grads": [flat(g) for g in grads], "final": flat(params)}))


if __name__ == "__main__":
    main()
