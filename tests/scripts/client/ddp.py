"""Two ranks under torchrun, DistributedDataParallel over Gloo, watched by dpt-tui: each rank
writes its steps and lr to OUT_DIR/rank-N.jsonl. A stop that reached the ranks at different
steps would hang the other rank in its allreduce. Run by tests/script_runs.rs."""
import json
import os
import sys

import torch
import torch.distributed as dist

import dpt_tui

dist.init_process_group("gloo")
rank = dist.get_rank()
out = open(os.path.join(sys.argv[1], f"rank-{rank}.jsonl"), "w")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.2)
run = dpt_tui.init(optimizer=opt, label="ddp-linear")
used = {}
opt.register_step_pre_hook(lambda o, args, kwargs: used.__setitem__("lr", o.param_groups[0]["lr"]))
g = torch.Generator().manual_seed(rank)
step = 0
while True:
    x = torch.randn(64, 16, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    out.write(json.dumps({"step": step, "lr": used["lr"]}) + "\n")
    out.flush()
    if run.step(loss=loss.item(), samples=64):
        break
run.finish()
out.write(json.dumps({"stopped_at": step}) + "\n")
out.close()
dist.destroy_process_group()
