"""What the Lightning and Hugging Face callbacks share: reading a batch's size, and keeping the
live run out of a pickled callback."""

from typing import Any, Dict


def batch_size(batch: Any) -> int:
    """The samples in a batch: the first dimension of its first tensor (0 when none is found)."""
    for _ in range(4):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 0
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)):
            batch = batch[0] if batch else None
        else:
            return 0
    return 0


class Picklable:
    """A callback pickled (spawned ranks, a copied trainer) leaves its open run behind."""

    _transient = ("_session",)

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._transient:
            state[name] = None
        return state


def callback_class(watch: type, base: type, module: str) -> type:
    """The framework's callback class: `watch`'s behaviour on the framework's `base`, named
    `module.DptTuiCallback` so that a pickled callback resolves in another process."""
    names = {"__module__": module, "__qualname__": "DptTuiCallback"}
    return type("DptTuiCallback", (watch, base), names)
