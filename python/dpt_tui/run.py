"""`dpt_tui.init` and the `Run` a plain training loop reports to.

    run = dpt_tui.init(config=vars(args), optimizer=opt, save=save_checkpoint)
    for batch in loader:
        ...
        opt.step()
        if run.step(loss=loss, samples=len(batch)):
            break          # stopped from the dashboard
    run.finish()
"""

from typing import Any, Callable, Optional

from ._identity import Identity, script_label
from ._open import disabled, open_session
from ._session import Session
from ._values import count, figures, number


class Run:
    """A run of a plain training loop: one `step()` per optimizer step, `eval()` at any step.

    Every call returns at once unless the dashboard paused the run: then `step()` blocks until it
    is resumed. A run made under `DPT_DISABLED=1` does nothing at all.
    """

    __slots__ = ("_session", "_steps")

    def __init__(self, session: Optional[Session]) -> None:
        self._session = session
        self._steps = 0

    def step(self, loss: Any = None, acc: Any = None, samples: Any = None, **scalars: Any) -> bool:
        """Report one optimizer step (call it after `optimizer.step()`); True when the run must stop.

        `loss`, `acc` and each named scalar are numbers, NumPy scalars or 0-d tensors (a CUDA
        tensor costs one device sync: pass `loss.item()` if the loop already has it); `samples` is
        this rank's sample count in the step. At this boundary the dashboard's controls apply: a
        pause blocks here until it is resumed, a save calls the `save` function given to `init`,
        an lr change scales the optimizer's next steps. Once a stop was asked for, every call
        returns True: the loop ends its training.
        """
        session = self._session
        if session is None:
            return False
        loss = number(loss, "loss")
        acc = number(acc, "acc")
        samples = count(samples, "samples")
        if scalars:
            figures(scalars, "scalar")
        self._steps += 1
        return session.step(self._steps, loss, acc, samples, scalars)

    def eval(self, **metrics: Any) -> None:
        """Report an evaluation at the current step: `run.eval(val_loss=..., val_acc=...)`."""
        session = self._session
        if session is not None:
            session.eval(figures(metrics, "metric"))

    def finish(self) -> None:
        """End the run: completed, or stopped when the dashboard asked. Calling it again does nothing."""
        if self._session is not None:
            self._session.finish_normally()

    @property
    def stop_requested(self) -> bool:
        """Whether the dashboard asked this run to stop."""
        return self._session is not None and self._session.stop_requested

    @property
    def steps(self) -> int:
        """The optimizer steps reported so far."""
        return self._steps

    @property
    def run_dir(self) -> Optional[str]:
        """The run directory dpt-tui records into (a good place for checkpoints), if any."""
        return self._session.run_dir if self._session is not None else None

    @property
    def watched(self) -> bool:
        """Whether a dpt-tui backend is watching (False when disabled or once the backend went away)."""
        return self._session is not None and self._session.watched

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        if self._session is not None:
            if exc is None:
                self._session.finish_normally()
            else:
                self._session.finish_with(exc, tb)
        return False

    def __repr__(self) -> str:
        if self._session is None:
            return "<dpt_tui.Run disabled>"
        state = "finished" if self._session.finished else ("watched" if self._session.watched else "unwatched")
        return f"<dpt_tui.Run {self._session.label!r} step {self._steps} {state}>"


def init(
    config: Any = None,
    optimizer: Any = None,
    save: Optional[Callable[[], Any]] = None,
    label: Optional[str] = None,
    total_steps: Optional[int] = None,
) -> Run:
    """Open this process's run and connect it to the dpt-tui dashboard.

    Under `dpt-tui run -- python SCRIPT` the run reports to that dashboard; a script started on
    its own starts a dpt-tui backend (`dpt-tui` on PATH) and, without one, trains unwatched after
    one notice on stderr. Nothing here ever stops the training because the dashboard went away.

    config: the script's settings (a dict, an argparse.Namespace or a dataclass), shown as given.
    optimizer: the torch optimizer, so the dashboard can scale its lr: a hook multiplies every
        param group's lr by the scale during `optimizer.step()` and puts the script's own lr back
        after it, so schedulers and loops that set lr keep working.
    save: a function of no arguments the dashboard's save calls (on rank 0 only); it may return
        the path it wrote. If it raises, the failure is reported and training goes on.
    label: the model or script as the dashboard names it (the script's file name by default).
    total_steps: the optimizer steps the run will take, for the progress bar and the ETA.

    Ranks come from torchrun's RANK, WORLD_SIZE and LOCAL_RANK; the device is the current CUDA
    device (call `torch.cuda.set_device` first), else MPS or the CPU. A second `init` while a run
    is open raises RuntimeError, except in a notebook, where the old run is finished as stopped.
    Under `DPT_DISABLED=1` the returned run does nothing.
    """
    if disabled():
        return Run(None)
    identity = Identity.from_env()
    session = open_session(
        framework="plain",
        label=label if label is not None else script_label(),
        identity=identity,
        config=config,
        optimizer=optimizer,
        can_save=save is not None,
        save=save if identity.rank == 0 else None,
        total_steps=total_steps,
    )
    return Run(session)


__all__ = ["Run", "init"]
