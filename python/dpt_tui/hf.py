"""`dpt_tui.HFCallback()`: a Hugging Face `Trainer` run reported to dpt-tui and steered from it.

transformers is imported when the factory is called; the package never depends on it.
"""

import functools
import os
from typing import Any, Dict, Optional

from ._framework import Picklable, callback_class
from ._identity import Identity, device, script_label
from ._names import is_eval
from ._open import disabled, open_session
from ._session import SAVE_LATER, Session
from ._values import readable


def HFCallback() -> Any:
    """A `TrainerCallback` for `Trainer(callbacks=[...])` that reports each optimizer step and
    takes the dashboard's controls.

    - a step is reported at each `on_step_end` (after `optimizer.step()`), numbered by
      `state.global_step`; the loss and figures HF logs (every `logging_steps`) go with the step
      that follows the log, and each evaluation is reported as an eval;
    - stop sets `control.should_training_stop`; save sets `control.should_save`, so HF writes
      its own `checkpoint-N` folder on its own ranks, and its path is reported once written;
    - lr scales the optimizer's param groups around each step (HF's schedules are `LambdaLR`);
    - pause holds every rank at the same optimizer-step boundary.
    """
    return _callback_class()()


@functools.lru_cache(maxsize=None)
def _callback_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise ImportError("dpt_tui.HFCallback needs transformers: pip install transformers") from None
    return callback_class(HFWatch, TrainerCallback, __name__)


def __getattr__(name: str) -> Any:
    # `dpt_tui.hf.DptTuiCallback` resolves, so a pickled callback loads in another process.
    if name == "DptTuiCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HFWatch(Picklable):
    """The callback's behaviour, apart from transformers' base class."""

    def __init__(self) -> None:
        self._session: Optional[Session] = None
        self._logged: Dict[str, Any] = {}
        self._save_asked = False
        self._save_pending = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if disabled():
            return
        model = kwargs.get("model")
        self._logged = {}
        self._save_asked = self._save_pending = False
        self._session = open_session(
            framework="hf",
            label=type(model).__name__ if model is not None else script_label(),
            identity=Identity(
                rank=int(getattr(args, "process_index", 0)),
                world_size=int(getattr(args, "world_size", 1)),
                local_rank=max(int(getattr(args, "local_process_index", 0)), 0),
                devices=[device(getattr(args, "device", None))],
            ),
            config=args.to_dict() if hasattr(args, "to_dict") else None,
            optimizer=_unwrap(kwargs.get("optimizer")),
            can_save=True,
            save=self._ask_save,
            total_steps=state.max_steps if getattr(state, "max_steps", 0) and state.max_steps > 0 else None,
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        session = self._session
        if session is None or session.finished:
            return
        logged, self._logged = self._logged, {}
        loss = logged.pop("loss", None)
        samples = int(getattr(args, "per_device_train_batch_size", 0) or 0) * int(
            getattr(args, "gradient_accumulation_steps", 1) or 1
        )
        self._save_asked = False
        if session.step(state.global_step, loss, None, samples or None, logged):
            control.should_training_stop = True
        if self._save_asked:
            control.should_save = True
            self._save_pending = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None, **kwargs: Any
    ) -> None:
        if self._session is not None and logs:
            self._logged.update(readable({k: v for k, v in logs.items() if not is_eval(k)}))

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Optional[Dict[str, Any]] = None, **kwargs: Any
    ) -> None:
        if self._session is not None and metrics:
            self._session.eval(readable(metrics), step=state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session is None or not self._save_pending:
            return
        self._save_pending = False
        if getattr(state, "is_world_process_zero", True):
            self._session.saved(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session is not None:
            self._session.finish_normally()

    def _ask_save(self) -> Any:
        self._save_asked = True
        return SAVE_LATER


def _unwrap(optimizer: Any) -> Any:
    """The torch optimizer inside accelerate's wrapper, whose step the hooks must see."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or not hasattr(inner, "param_groups"):
            break
        optimizer = inner
    return optimizer
