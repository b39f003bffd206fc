"""The controls the backend scheduled for this rank, kept until the rank's step count reaches them.

Every answer carries the controls scheduled since this rank's previous answer, each at a step
`at_step`; a rank applies each one at the boundary after its own step `at_step`, in the order
they came, so every rank applies it at the same step whether it was ahead or behind when it heard.
"""

from dataclasses import dataclass
from math import isfinite
from typing import Any, Iterable, List, Mapping, Optional

PAUSE = "pause"
RESUME = "resume"
STOP = "stop"
SAVE = "save"
LR_SCALE = "lr_scale"


@dataclass(frozen=True)
class Control:
    """One control: what to do (`kind`), at which step, and a scale for `lr_scale`."""

    kind: str
    at_step: int
    scale: Optional[float] = None


def parse(raw: Any) -> Optional[Control]:
    """A control as the backend wrote it; `None` for one this client cannot read."""
    if not isinstance(raw, Mapping):
        return None
    kind, at_step = raw.get("control"), raw.get("at_step")
    if not isinstance(kind, str) or type(at_step) is not int:
        return None
    scale = raw.get("scale")
    if kind == LR_SCALE:
        if type(scale) not in (int, float) or not isfinite(scale) or scale <= 0:
            return None
        scale = float(scale)
    else:
        scale = None
    return Control(kind, at_step, scale)


class Schedule:
    """The controls heard but not yet applied, in the order they came."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: List[Control] = []

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, raw_controls: Iterable[Any]) -> None:
        for raw in raw_controls:
            control = parse(raw)
            if control is not None:
                self._pending.append(control)

    def due(self, step: int) -> List[Control]:
        """Take out the controls due at or before `step`, in order; the later ones stay."""
        due = [c for c in self._pending if c.at_step <= step]
        if due:
            self._pending = [c for c in self._pending if c.at_step > step]
        return due
