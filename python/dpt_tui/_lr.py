"""The dashboard's learning-rate scale, applied around each `optimizer.step()`.

A learning rate written once into `param_groups` would be undone by the next `scheduler.step()`
or by a loop that sets it each iteration. The scale is multiplied in by a step pre-hook and the
learning rates the script set are put back by a post-hook, so any schedule keeps working and the
step uses the schedule's lr times the scale.
"""

from typing import Any, List, Optional


class LrScale:
    """Hooks on one optimizer that scale every param group's lr during its steps."""

    def __init__(self, optimizer: Any) -> None:
        if not hasattr(optimizer, "register_step_pre_hook"):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer (torch 2.0 or newer), got {type(optimizer).__name__}"
            )
        self.scale = 1.0
        self._optimizer = optimizer
        self._used: Optional[float] = None
        self._saved: Optional[List[Any]] = None
        self._handles = [
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
        ]

    def used_lr(self) -> Optional[float]:
        """The lr of the first param group as the last step used it (scale included)."""
        if self._used is not None:
            return self._used
        groups = self._optimizer.param_groups
        return float(groups[0]["lr"]) * self.scale if groups else None

    def detach(self) -> None:
        """Remove the hooks: the optimizer steps with its own lr again."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._restore()

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._restore()  # a step that raised never ran the post-hook
        groups = optimizer.param_groups
        scale = self.scale
        if scale != 1.0:
            self._saved = [_scale_in(group, scale) for group in groups]
        if groups:
            self._used = float(groups[0]["lr"])

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._restore()

    def _restore(self) -> None:
        """Put back the exact lrs the script had set (dividing would drift by rounding)."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        for group, lr in zip(self._optimizer.param_groups, saved):
            if hasattr(lr, "copy_"):
                group["lr"].copy_(lr)
            else:
                group["lr"] = lr


def _scale_in(group: Any, scale: float) -> Any:
    """Scale one group's lr; return what puts it back."""
    lr = group["lr"]
    if hasattr(lr, "mul_"):
        # A tensor lr (capturable and fused optimizers) keeps its identity: scaled in place.
        original = lr.clone()
        lr.mul_(scale)
        return original
    group["lr"] = lr * scale
    return lr
