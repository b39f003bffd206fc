"""`dpt_tui.LightningCallback()`: a Lightning fit reported to dpt-tui and steered from it.

Lightning is imported when the factory is called (`lightning.pytorch`, else `pytorch_lightning`);
the package never depends on it.
"""

import functools
import math
import os
from typing import Any, Optional

from ._framework import Picklable, callback_class, batch_size
from ._identity import Identity, device
from ._names import ACC_WORDS, LOSS_WORDS, is_eval, pick
from ._open import disabled, open_session
from ._session import Session
from ._values import number, readable


def LightningCallback() -> Any:
    """A `Callback` for `Trainer(callbacks=[...])` that reports each optimizer step and takes
    the dashboard's controls.

    - a step is reported when `trainer.global_step` moves (micro-batches of gradient
      accumulation are summed into it), with the loss of the training step's output and the
      training figures of `trainer.callback_metrics`; each validation is reported as an eval;
    - stop sets `trainer.should_stop` (Lightning agrees on it across ranks);
    - save calls `trainer.save_checkpoint` on every rank, as Lightning requires, into
      `checkpoints/` of the dpt-tui run directory (else the trainer's `default_root_dir`);
    - lr scales the first optimizer's param groups around each of its steps;
    - pause holds every rank at the same optimizer-step boundary.
    """
    return _callback_class()()


@functools.lru_cache(maxsize=None)
def _callback_class() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise ImportError("dpt_tui.LightningCallback needs Lightning: pip install lightning") from None
    return callback_class(LightningWatch, Callback, __name__)


def __getattr__(name: str) -> Any:
    # `dpt_tui.lightning.DptTuiCallback` resolves, so a pickled callback loads in a spawned rank.
    if name == "DptTuiCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LightningWatch(Picklable):
    """The callback's behaviour, apart from Lightning's base class."""

    _transient = ("_session", "_trainer")

    def __init__(self) -> None:
        self._session: Optional[Session] = None
        self._trainer: Any = None
        self._global_step = 0
        self._samples = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if disabled():
            return
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        self._trainer = trainer
        self._global_step = trainer.global_step
        self._samples = 0
        self._session = open_session(
            framework="lightning",
            label=type(pl_module).__name__,
            identity=Identity(
                rank=trainer.global_rank,
                world_size=trainer.world_size,
                local_rank=trainer.local_rank,
                devices=[device(getattr(getattr(trainer, "strategy", None), "root_device", None))],
            ),
            config=_hparams(pl_module),
            optimizer=optimizers[0] if optimizers else None,
            can_save=True,
            save=self._save,
            report_saves=bool(trainer.is_global_zero),
            total_steps=_total_steps(trainer),
        )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        session = self._session
        if session is None or session.finished:
            return
        self._samples += batch_size(batch)
        step = trainer.global_step
        if step == self._global_step:
            return  # a micro-batch of gradient accumulation: no optimizer step yet
        self._global_step = step
        metrics = readable({k: v for k, v in trainer.callback_metrics.items() if not is_eval(k)})
        loss = _loss(outputs)
        if loss is None:
            loss = pick(metrics, LOSS_WORDS)
        samples, self._samples = self._samples or None, 0
        if session.step(step, loss, pick(metrics, ACC_WORDS), samples, metrics):
            trainer.should_stop = True

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        session = self._session
        if session is None or getattr(trainer, "sanity_checking", False):
            return
        metrics = readable({k: v for k, v in trainer.callback_metrics.items() if is_eval(k)})
        if metrics:
            session.eval(metrics, step=trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._session is not None:
            self._session.finish_normally()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._session is not None:
            self._session.finish_with(exception)

    def _save(self) -> str:
        trainer = self._trainer
        folder = (self._session.run_dir if self._session else None) or trainer.default_root_dir
        path = os.path.join(folder, "checkpoints", f"dpt-tui-step={trainer.global_step}.ckpt")
        trainer.save_checkpoint(path)
        return path


def _loss(outputs: Any) -> Optional[float]:
    """The loss of a training step's output: the tensor itself or its `loss` entry."""
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    if outputs is None:
        return None
    try:
        return number(outputs, "loss")
    except TypeError:
        return None


def _total_steps(trainer: Any) -> Optional[int]:
    try:
        total = trainer.estimated_stepping_batches
    except Exception:  # Lightning raises for loaders of unknown length
        return None
    return int(total) if isinstance(total, (int, float)) and math.isfinite(total) else None


def _hparams(pl_module: Any) -> Any:
    hparams = getattr(pl_module, "hparams", None)
    return dict(hparams) if hparams else None
