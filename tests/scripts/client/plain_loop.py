"""A plain PyTorch loop watched by dpt-tui: trains until the dashboard stops it, writing each
step's number and the lr its optimizer used to OUT (one JSON line each), so a test can check what
each control did. Run by tests/script_runs.rs under `dpt-tui run --`."""
import json
import os
import sys

import torch

import dpt_tui

out = open(sys.argv[1], "w")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
# A schedule that sets the lr each step, as most do: the dashboard's change must survive it.
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


def save():
    path = os.path.join(os.environ["DPT_TUI_RUN_DIR"], "weights.pt")
    torch.save(model.state_dict(), path)
    return path


run = dpt_tui.init(config={"lr": 0.1, "hidden": 64}, optimizer=opt, save=save, label="mlp")
used = {}
# Registered after init's own hook: it sees the lr the step really uses.
opt.register_step_pre_hook(lambda o, args, kwargs: used.__setitem__("lr", o.param_groups[0]["lr"]))
x, y = torch.randn(256, 32), torch.randn(256, 1)
step = 0
while True:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    step += 1
    out.write(json.dumps({"step": step, "lr": used["lr"]}) + "\n")
    out.flush()
    # From the first step on, so a run stopped early has evaluations too.
    if step % 50 == 1:
        run.eval(val_loss=loss.item())
    if run.step(loss=loss.item(), samples=256, sq=loss.item() ** 2):
        break
run.finish()
out.write(json.dumps({"stopped_at": step}) + "\n")
out.close()
