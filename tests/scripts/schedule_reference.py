"""PyTorch's learning rates for dpt-tui's schedule tests: builds the `torch.optim.lr_scheduler`
classes that each dpt-tui schedule follows and prints the lr of every optimizer step as JSON.

`python schedule_reference.py SPEC_JSON` with SPEC_JSON {"shape", "lr", "warmup", "total",
"min_lr", "gamma", "milestones" (epochs), "steps_per_epoch"}.
"""
import json
import sys

import torch
from torch.optim import lr_scheduler as S


def main():
    spec = json.loads(sys.argv[1])
    lr, w, total, min_lr = spec["lr"], spec["warmup"], spec["total"], spec["min_lr"]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    shape = spec["shape"]
    if shape == "onecycle":
        pct = w / total if w > 0 else 0.3
        sched = S.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=pct)
    else:
        rest = total - w
        if shape == "constant":
            main_sched = S.ConstantLR(opt, factor=1.0, total_iters=0)
        elif shape == "cosine":
            main_sched = S.CosineAnnealingLR(opt, T_max=rest, eta_min=min_lr)
        elif shape == "linear":
            main_sched = S.LinearLR(opt, start_factor=1.0, end_factor=min_lr / lr, total_iters=rest)
        elif shape == "step":
            # dpt-tui's milestones are epochs of the whole run; SequentialLR restarts the count
            # after the warm-up.
            steps = [m * spec["steps_per_epoch"] - w for m in spec["milestones"]]
            main_sched = S.MultiStepLR(opt, milestones=steps, gamma=spec["gamma"])
        else:
            raise SystemExit(f"unknown shape {shape}")
        if w > 0:
            warm = S.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)
            sched = S.SequentialLR(opt, schedulers=[warm, main_sched], milestones=[w])
        else:
            sched = main_sched
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    print(json.dumps(lrs))


if __name__ == "__main__":
    main()
