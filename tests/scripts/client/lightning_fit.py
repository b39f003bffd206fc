"""A Lightning fit watched by dpt-tui through `dpt_tui.LightningCallback()`: trains until the
dashboard stops it, writing each optimizer step's global step and the lr its optimizer used to
OUT. Run by tests/script_runs.rs."""
import json
import sys

import lightning.pytorch as pl
import torch

import dpt_tui


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Probe(pl.Callback):
    """Records the lr each step used (its hook runs after dpt_tui's, which scales it)."""

    def __init__(self, out):
        self.out, self.used = out, None

    def on_train_start(self, trainer, pl_module):
        opt = trainer.optimizers[0]
        opt.register_step_pre_hook(lambda o, a, k: setattr(self, "used", o.param_groups[0]["lr"]))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.out.write(json.dumps({"step": trainer.global_step, "lr": self.used}) + "\n")
        self.out.flush()


out = open(sys.argv[1], "w")
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
trainer = pl.Trainer(
    max_steps=1_000_000,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    enable_checkpointing=False,
    callbacks=[dpt_tui.LightningCallback(), Probe(out)],
    default_root_dir=sys.argv[2],
)
trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))
out.write(json.dumps({"stopped_at": trainer.global_step}) + "\n")
out.close()
