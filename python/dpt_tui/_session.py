"""A watched run as one rank sees it: the messages it sends and the controls it follows.

A `Session` is driven by whatever knows where the optimizer steps are (the plain `Run`, the
Animator, the Lightning and Hugging Face callbacks): each tells it the step number it reached, and
the session reports it, hears the controls due and applies them at that boundary: it blocks there
while paused, scales the lr through the optimizer's hooks, calls the save action and remembers a
stop, which the driver turns into its own way of stopping.
"""

import os
import time
from typing import Any, Callable, Dict, Optional

from . import _lifecycle
from ._controls import LR_SCALE, PAUSE, RESUME, SAVE, STOP, Schedule
from ._failure import describe
from ._lr import LrScale
from ._warn import say
from ._wire import Connection

POLL_INTERVAL_S = 0.2

COMPLETED = "completed"
STOPPED = "stopped"
FAILED = "failed"

# What a save action returns when the framework saves later and reports through `Session.saved`.
SAVE_LATER = object()

SaveAction = Callable[[], Any]


class Session:
    """One rank's live run. Every method is safe to call after `finish` (it does nothing)."""

    def __init__(
        self,
        connection: Connection,
        *,
        label: str,
        framework: str,
        lr: Optional[LrScale] = None,
        save: Optional[SaveAction] = None,
        report_saves: bool = True,
    ) -> None:
        self.label = label
        self.framework = framework
        self.run_dir: Optional[str] = os.environ.get("DPT_TUI_RUN_DIR") or None
        self._connection = connection
        self._lr = lr
        self._save = save
        self._report_saves = report_saves
        self._schedule = Schedule()
        self._stop = False
        self._finished = False
        self._step = 0
        self._pid = os.getpid()
        self._mark = time.perf_counter()
        self._paused_s = 0.0

    @property
    def stop_requested(self) -> bool:
        """Whether a stop from the dashboard is due: the driver stops its training."""
        return self._stop

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def watched(self) -> bool:
        return self._connection.alive

    @property
    def last_step(self) -> int:
        return self._step

    def in_this_process(self) -> bool:
        """False in a child forked after the run opened: the child must not speak for the run."""
        return os.getpid() == self._pid

    def start(self, hello: Dict[str, Any]) -> None:
        """Say hello; controls already due (scheduled at step 0) apply before the first step."""
        welcome = self._connection.hello(hello) if self._connection.alive else None
        if welcome is not None:
            run_dir = welcome.get("run_dir")
            if isinstance(run_dir, str) and run_dir:
                self.run_dir = run_dir
            controls = welcome.get("controls")
            if isinstance(controls, list):
                self._schedule.add(controls)
        if self._schedule:
            self._steer(0)
        self._mark = time.perf_counter()
        self._paused_s = 0.0

    def step(self, step: int, loss: Any, acc: Any, samples: Any, scalars: Dict[str, Any]) -> bool:
        """Report optimizer step `step` (values already read), then apply what is due at it."""
        if self._finished:
            return self._stop
        now = time.perf_counter()
        step_ms = (now - self._mark - self._paused_s) * 1000.0
        self._mark = now
        self._paused_s = 0.0
        self._step = step
        if self._connection.alive:
            controls = self._connection.request({
                "type": "step", "step": step, "loss": loss, "acc": acc, "samples": samples,
                "lr": self._lr.used_lr() if self._lr is not None else None,
                "step_ms": step_ms, "scalars": scalars,
            })
            if controls:
                self._schedule.add(controls)
        if self._schedule:
            self._steer(step)
        return self._stop

    def eval(self, metrics: Dict[str, Any], step: Optional[int] = None) -> None:
        """Report an evaluation at `step` (the last step reported when not given)."""
        if not self._finished:
            self._send({"type": "eval", "step": self._step if step is None else step, "metrics": metrics})

    def saved(self, path: Any) -> None:
        """Report a save the framework made after a `SAVE_LATER` (path: str, PathLike or None)."""
        if not self._finished:
            self._send({"type": "saved", "step": self._step, "path": _path(path)})

    def finish(self, status: str, message: Optional[str] = None) -> None:
        """Send `finish` once and close; the lr hooks come off the optimizer."""
        if self._finished:
            return
        self._finished = True
        if not self.in_this_process():
            return  # a forked child shares the parent's socket: it must not end the parent's run
        try:
            if self._connection.alive:
                self._connection.request({"type": "finish", "step": self._step, "status": status, "message": message})
        finally:
            self._connection.close()
            if self._lr is not None:
                self._lr.detach()
            _lifecycle.release(self)

    def finish_normally(self) -> None:
        """Finish as `stopped` when the dashboard asked for a stop, else as `completed`."""
        self.finish(STOPPED if self._stop else COMPLETED)

    def finish_with(self, exc: BaseException, tb: Any = None) -> None:
        """Finish because of an exception: a Ctrl-C is a stop, anything else a failure."""
        if isinstance(exc, KeyboardInterrupt):
            self.finish(STOPPED)
        elif isinstance(exc, SystemExit) and exc.code in (None, 0):
            self.finish_normally()
        else:
            self.finish(FAILED, describe(exc, tb))

    def _send(self, message: Dict[str, Any]) -> None:
        controls = self._connection.request(message)
        if controls:
            self._schedule.add(controls)

    def _steer(self, step: int) -> None:
        """Apply the controls due at `step`; while paused, poll until a resume or a stop is due."""
        paused = False
        due = self._schedule.due(step)
        while True:
            for control in due:
                kind = control.kind
                if kind == PAUSE:
                    paused = True
                elif kind == RESUME:
                    paused = False
                elif kind == STOP:
                    self._stop = True
                    paused = False
                elif kind == SAVE:
                    self._run_save()
                elif kind == LR_SCALE and self._lr is not None:
                    self._lr.scale = control.scale
                # a kind this client does not know is skipped
            if not paused or not self._connection.alive:
                return
            began = time.perf_counter()
            time.sleep(POLL_INTERVAL_S)
            self._send({"type": "poll", "step": step})
            self._paused_s += time.perf_counter() - began
            due = self._schedule.due(step)

    def _run_save(self) -> None:
        if self._save is None:
            return
        try:
            result = self._save()
        except Exception as e:
            message = describe(e)
            say(f"the save asked from the dashboard failed at step {self._step}: {message}; training goes on")
            self._send({"type": "save_failed", "step": self._step, "message": message})
            return
        if result is not SAVE_LATER and self._report_saves:
            self._send({"type": "saved", "step": self._step, "path": _path(result)})


def _path(result: Any) -> Optional[str]:
    """The absolute path a save returned, or `None` when it returned something else."""
    if isinstance(result, (str, os.PathLike)):
        try:
            return os.path.abspath(os.fsdecode(result))
        except (TypeError, ValueError):
            return None
    return None
