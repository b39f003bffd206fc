"""`dpt_tui.Animator`: d2l's Animator, drawn by the dpt-tui dashboard instead of matplotlib.

It keeps `X` and `Y` exactly as d2l's does (one list per curve, `animator.Y[0][-1]` is the last
value of the first curve) and reports every `add` to a run it opens on the first one.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._identity import Identity, script_label
from ._lifecycle import current
from ._names import is_eval
from ._open import disabled, open_session
from ._session import Session
from ._values import number


class Animator:
    """Plots curves as d2l's `Animator` does, on the dpt-tui dashboard.

    The arguments are d2l's; those about drawing (limits, scales, formats, figure size) are kept
    as attributes and otherwise unused. Each curve is named by its legend entry (or, for a single
    curve, by `ylabel`), and the name says what the value is:

    - a name starting with `test`, `val` or `eval` is an evaluation metric (`test acc`);
    - otherwise a name containing `loss` is the step's loss, one containing `acc` its accuracy;
    - every value also goes into the step's scalars under its name, and `x` under `epoch`.

    Each `add` is one step of the run, except an `add` that carries only evaluation values while
    other curves are training curves (d2l's `animator.add(epoch + 1, (None, None, test_acc))`):
    that one is an evaluation at the current step. `add` returns True once the dashboard asked
    the run to stop; a loop that wants its stop button checks it. The run finishes when the
    script ends, or when a new Animator's first `add` opens the next run.
    """

    def __init__(
        self,
        xlabel: Optional[str] = None,
        ylabel: Optional[str] = None,
        legend: Optional[Sequence[str]] = None,
        xlim: Any = None,
        ylim: Any = None,
        xscale: str = "linear",
        yscale: str = "linear",
        fmts: Sequence[str] = ("-", "m--", "g-.", "r:"),
        nrows: int = 1,
        ncols: int = 1,
        figsize: Tuple[float, float] = (3.5, 2.5),
    ) -> None:
        if legend is None:
            legend = []
        for name in legend:
            if not isinstance(name, str):
                raise TypeError(f"legend entries must be str, got {type(name).__name__} {name!r}")
        self.xlabel, self.ylabel, self.legend = xlabel, ylabel, list(legend)
        self.xlim, self.ylim, self.xscale, self.yscale = xlim, ylim, xscale, yscale
        self.nrows, self.ncols, self.figsize = nrows, ncols, figsize
        self.X: Optional[List[List[Any]]] = None
        self.Y: Optional[List[List[Any]]] = None
        self.fmts = fmts
        self._session: Optional[Session] = None
        self._opened = False
        self._steps = 0

    def add(self, x: Any, y: Any) -> bool:
        """Append one point per curve (`y` a number or a sequence, `x` one for all or one each).

        A `None` in `x` or `y` skips that curve, as in d2l. Returns True once a stop was asked.
        """
        if not hasattr(y, "__len__"):
            y = [y]
        n = len(y)
        if not hasattr(x, "__len__"):
            x = [x] * n
        if not self.X:
            self.X = [[] for _ in range(n)]
        if not self.Y:
            self.Y = [[] for _ in range(n)]
        points = []
        for i, (a, b) in enumerate(zip(x, y)):
            if a is not None and b is not None:
                self.X[i].append(a)
                self.Y[i].append(b)
                points.append((i, a, b))
        return self._report(points, n)

    def _curve_name(self, i: int, n: int) -> str:
        if i < len(self.legend):
            return self.legend[i]
        if n == 1 and self.ylabel:
            return str(self.ylabel)
        return f"y{i}"

    def _report(self, points: List[Tuple[int, Any, Any]], n: int) -> bool:
        session = self._run()
        if session is None or not points:
            return session is not None and session.stop_requested
        scalars: Dict[str, Any] = {"epoch": number(points[0][1], "x")}
        evals: Dict[str, Any] = {}
        loss = acc = None
        for i, _, value in points:
            name = self._curve_name(i, n)
            value = number(value, f"the value of {name!r}")
            scalars[name] = value
            key = name.lower()
            if is_eval(name):
                evals[name] = value
            elif loss is None and "loss" in key:
                loss = value
            elif acc is None and "acc" in key:
                acc = value
        has_train_curves = any(not is_eval(self._curve_name(i, n)) for i in range(n))
        if len(evals) < len(points) or not has_train_curves:
            self._steps += 1
            session.step(self._steps, loss, acc, None, scalars)
        if evals:
            session.eval(evals)
        return session.stop_requested

    def _run(self) -> Optional[Session]:
        """The run, opened on the first add; none when disabled or another run is open."""
        if self._opened:
            return self._session if self._session is not None and not self._session.finished else None
        self._opened = True
        if disabled():
            return None
        other = current()
        if other is not None and not other.finished and other.framework != "animator":
            return None  # the script reports through its own run; the Animator only keeps X and Y
        names = ", ".join(self.legend) if self.legend else (str(self.ylabel) if self.ylabel else "")
        label = f"{script_label()}: {names}" if names else script_label()
        self._session = open_session(framework="animator", label=label, identity=Identity.from_env())
        return self._session
