"""A Hugging Face `Trainer` watched by dpt-tui through `dpt_tui.HFCallback()`: a tiny model made
here (no download) trains until the dashboard stops it, writing each step's global step and the
lr its optimizer used to OUT. Run by tests/script_runs.rs."""
import json
import sys

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import dpt_tui


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}


class Rows(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(4096, 8, generator=g), torch.randn(4096, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Probe(TrainerCallback):
    """Records the lr each step used (its hook runs after dpt_tui's, which scales it)."""

    def __init__(self, out):
        self.out, self.used = out, None

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        inner = getattr(optimizer, "optimizer", optimizer)
        inner.register_step_pre_hook(lambda o, a, k: setattr(self, "used", o.param_groups[0]["lr"]))

    def on_step_end(self, args, state, control, **kwargs):
        self.out.write(json.dumps({"step": state.global_step, "lr": self.used}) + "\n")
        self.out.flush()


out = open(sys.argv[1], "w")
args = TrainingArguments(
    output_dir=sys.argv[2],
    max_steps=1_000_000,
    per_device_train_batch_size=16,
    learning_rate=0.1,
    lr_scheduler_type="constant",
    optim="sgd",
    logging_steps=1,
    save_strategy="steps",
    save_steps=10_000_000,
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
trainer = Trainer(model=Tiny(), args=args, train_dataset=Rows(), callbacks=[dpt_tui.HFCallback(), Probe(out)])
trainer.train()
out.write(json.dumps({"stopped_at": trainer.state.global_step}) + "\n")
out.close()
