"""The Lightning and Hugging Face callbacks: their behaviour against stand-ins for the trainers
(always), and inside the real frameworks when those are installed."""

import contextlib
import importlib.util
import io
import os
import pickle
import tempfile
import unittest
from types import SimpleNamespace

import torch

import dpt_tui
from dpt_tui.hf import HFWatch, _unwrap
from dpt_tui.lightning import LightningWatch

from .fake_backend import control
from .support import BackendTest

HAS_LIGHTNING = bool(importlib.util.find_spec("lightning") or importlib.util.find_spec("pytorch_lightning"))
HAS_TRANSFORMERS = bool(importlib.util.find_spec("transformers"))


class Module:
    hparams = {"lr": 0.1}


def lightning_trainer(opt, folder):
    saved = []
    trainer = SimpleNamespace(
        global_step=0, global_rank=0, world_size=1, local_rank=0, is_global_zero=True,
        strategy=SimpleNamespace(root_device=torch.device("cpu")), optimizers=[opt], callback_metrics={},
        estimated_stepping_batches=10, default_root_dir=folder, should_stop=False, sanity_checking=False,
        save_checkpoint=saved.append,
    )
    return trainer, saved


class LightningWatchTest(BackendTest):
    def test_steps_at_optimizer_boundaries_with_stop_save_and_eval(self):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        trainer, saved = lightning_trainer(opt, tempfile.gettempdir())
        watch = LightningWatch()
        watch.on_train_start(trainer, Module())
        hello = self.backend.of_type("hello")[0]
        self.assertEqual((hello["framework"], hello["label"], hello["can"], hello["total_steps"], hello["config"]),
                         ("lightning", "Module", ["pause", "stop", "lr", "save"], 10, {"lr": 0.1}))
        batch = (torch.zeros(8, 3), torch.zeros(8))
        trainer.callback_metrics = {"train_acc": torch.tensor(0.5), "val_acc": torch.tensor(0.25)}
        watch.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.0)}, batch, 0)  # accumulating
        self.assertEqual(self.steps(), [])
        self.backend.after_step(1, control("save", 1), control("stop", 2))
        trainer.global_step = 1
        watch.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.0)}, batch, 1)
        (step,) = self.steps()
        self.assertEqual((step["step"], step["loss"], step["acc"], step["samples"], step["scalars"]),
                         (1, 2.0, 0.5, 16, {"train_acc": 0.5}))
        path = os.path.join(self.backend.run_dir, "checkpoints", "dpt-tui-step=1.ckpt")
        self.assertEqual(saved, [path])
        self.assertEqual(self.backend.of_type("saved")[0]["path"], path)
        self.assertFalse(trainer.should_stop)
        trainer.global_step = 2
        watch.on_train_batch_end(trainer, None, torch.tensor(1.0), batch, 2)
        self.assertTrue(trainer.should_stop)
        watch.on_validation_end(trainer, None)
        self.assertEqual(self.backend.of_type("eval"), [{"type": "eval", "step": 2, "metrics": {"val_acc": 0.25}}])
        pickle.loads(pickle.dumps(watch))  # the open run stays behind
        watch.on_train_end(trainer, None)
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "stopped")

    def test_an_exception_in_the_fit_fails_the_run(self):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        trainer, _ = lightning_trainer(opt, tempfile.gettempdir())
        watch = LightningWatch()
        watch.on_train_start(trainer, Module())
        watch.on_exception(trainer, None, RuntimeError("CUDA out of memory"))
        self.assertEqual(self.backend.of_type("finish")[0]["message"], "RuntimeError: CUDA out of memory")


class HFWatchTest(BackendTest):
    def test_steps_logs_evals_stop_and_save(self):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        folder = tempfile.mkdtemp()
        args = SimpleNamespace(process_index=1, world_size=2, local_process_index=1, device=torch.device("cpu"),
                               per_device_train_batch_size=8, gradient_accumulation_steps=2, output_dir=folder,
                               to_dict=lambda: {"learning_rate": 0.1})
        state = SimpleNamespace(global_step=0, max_steps=5, is_world_process_zero=True)
        flow = SimpleNamespace(should_training_stop=False, should_save=False)
        watch = HFWatch()
        wrapped = SimpleNamespace(optimizer=opt, param_groups=opt.param_groups)  # as accelerate wraps it
        watch.on_train_begin(args, state, flow, model=torch.nn.Linear(2, 2), optimizer=wrapped)
        hello = self.backend.of_type("hello")[0]
        fields = ("framework", "label", "rank", "world_size", "can", "total_steps")
        self.assertEqual(tuple(hello[k] for k in fields), ("hf", "Linear", 1, 2, ["pause", "stop", "lr", "save"], 5))
        self.backend.after_step(1, control("save", 2), control("stop", 3))
        state.global_step = 1
        watch.on_step_end(args, state, flow)
        watch.on_log(args, state, flow, logs={"loss": 0.75, "learning_rate": 0.1, "eval_loss": 9.0})
        state.global_step = 2
        watch.on_step_end(args, state, flow)
        first, second = self.steps()
        self.assertEqual((first["loss"], first["samples"], first["scalars"]), (None, 16, {}))
        self.assertEqual((second["loss"], second["scalars"]), (0.75, {"learning_rate": 0.1}))
        self.assertTrue(flow.should_save)
        watch.on_save(args, state, flow)
        self.assertEqual(self.backend.of_type("saved")[0]["path"], os.path.join(folder, "checkpoint-2"))
        watch.on_evaluate(args, state, flow, metrics={"eval_loss": 0.5, "epoch": 1.0})
        self.assertEqual(self.backend.of_type("eval")[0]["metrics"], {"eval_loss": 0.5, "epoch": 1.0})
        state.global_step = 3
        watch.on_step_end(args, state, flow)
        self.assertTrue(flow.should_training_stop)
        watch.on_train_end(args, state, flow)
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "stopped")

    def test_the_optimizer_inside_accelerates_wrapper_gets_the_hooks(self):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        self.assertIs(_unwrap(SimpleNamespace(optimizer=opt, param_groups=opt.param_groups)), opt)
        self.assertIs(_unwrap(opt), opt)


@unittest.skipUnless(HAS_LIGHTNING, "Lightning is not installed")
class RealLightningTest(BackendTest):
    def test_a_fit_is_reported_and_steered_from_the_dashboard(self):
        try:
            import lightning.pytorch as pl
        except ImportError:
            import pytorch_lightning as pl

        class Tiny(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

            def validation_step(self, batch, batch_idx):
                x, y = batch
                self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        def loader():
            data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64))
            return torch.utils.data.DataLoader(data, batch_size=8)

        self.backend.after_step(1, control("lr_scale", 1, scale=2.0), control("save", 2), control("stop", 5))
        folder = tempfile.mkdtemp()
        self.backend.run_dir = folder
        trainer = pl.Trainer(max_steps=8, accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2,
                             limit_val_batches=2, num_sanity_val_steps=0, callbacks=[dpt_tui.LightningCallback()])
        trainer.fit(Tiny(), loader(), loader())
        self.assertEqual(self.backend.of_type("hello")[0]["framework"], "lightning")
        steps = self.steps()
        self.assertEqual([(s["step"], s["samples"]) for s in steps], [(k, 16) for k in range(1, 6)])
        self.assertEqual([s["lr"] for s in steps], [0.1] + [0.2] * 4)
        self.assertIsNotNone(steps[0]["loss"])
        (saved,) = self.backend.of_type("saved")
        self.assertEqual((saved["step"], os.path.isfile(saved["path"])), (2, True))
        # at the epoch's end, and again when Lightning stops early
        self.assertEqual([(e["step"], list(e["metrics"])) for e in self.backend.of_type("eval")],
                         [(4, ["val_loss"]), (5, ["val_loss"])])
        self.assertEqual(trainer.global_step, 5)
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "stopped")


@unittest.skipUnless(HAS_TRANSFORMERS, "transformers is not installed")
class RealHFTest(BackendTest):
    def test_a_training_is_reported_and_steered_from_the_dashboard(self):
        from transformers import Trainer, TrainingArguments

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)

            def forward(self, x, labels):
                return {"loss": torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), labels)}

        data = [{"x": torch.randn(4), "labels": torch.randn(())} for _ in range(64)]
        folder = tempfile.mkdtemp()
        args = TrainingArguments(output_dir=folder, max_steps=6, per_device_train_batch_size=8, logging_steps=1,
                                 eval_strategy="steps", eval_steps=4, save_strategy="no", report_to=[], use_cpu=True,
                                 disable_tqdm=True)
        self.backend.after_step(1, control("lr_scale", 1, scale=2.0), control("save", 2), control("stop", 5))
        trainer = Trainer(model=Tiny(), args=args, train_dataset=data, eval_dataset=data[:16],
                          callbacks=[dpt_tui.HFCallback()])
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        self.assertEqual(self.backend.of_type("hello")[0]["framework"], "hf")
        steps = self.steps()
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4, 5])
        scheduled = [5e-5 * (6 - k) / 6 for k in range(5)]  # HF's linear decay, no warm-up
        for k, step in enumerate(steps):
            self.assertAlmostEqual(step["lr"], scheduled[k] * (2.0 if k else 1.0))
        self.assertIsNone(steps[0]["loss"])  # HF logs the loss after the step: it comes with the next one
        self.assertIsNotNone(steps[1]["loss"])
        self.assertEqual(self.backend.of_type("saved")[0]["path"], os.path.join(folder, "checkpoint-2"))
        self.assertTrue(os.path.isdir(os.path.join(folder, "checkpoint-2")))
        self.assertIn("eval_loss", self.backend.of_type("eval")[0]["metrics"])
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "stopped")
