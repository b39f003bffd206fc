"""The one run open in this process, and how it ends when the script does.

A run left open is finished when the interpreter exits (completed, or stopped when the dashboard
asked for a stop). An uncaught exception finishes it as failed, through a `sys.excepthook` that
hands on to the one it found. A second run while one is open is a mistake in a script, but the
normal thing in a notebook that runs its cell again: there the old run is finished as stopped.
"""

import atexit
import sys
from typing import Any, Optional

_open: Optional[Any] = None  # the open Session
_previous_hook = None


def interactive() -> bool:
    """A Jupyter kernel or an interactive interpreter, where re-running a cell is normal."""
    return "ipykernel" in sys.modules or hasattr(sys, "ps1")


def make_room(label: str, framework: str) -> None:
    """Before a run opens: finish the one open, or raise when a script opened two."""
    current = _open
    if current is None or current.finished or not current.in_this_process():
        return
    if interactive():
        current.finish("stopped", None)
    elif framework == "animator" and current.framework == "animator":
        current.finish_normally()  # a script trains again with a new Animator
    else:
        raise RuntimeError(
            f"a dpt_tui run is already open in this process ({current.label}); call run.finish() first"
        )


def claim(session: Any) -> None:
    global _open
    _open = session
    _install_hooks()


def release(session: Any) -> None:
    global _open
    if _open is session:
        _open = None


def current() -> Optional[Any]:
    return _open


def _install_hooks() -> None:
    global _previous_hook
    if _previous_hook is not None:
        return
    _previous_hook = sys.excepthook
    sys.excepthook = _on_uncaught
    atexit.register(_on_exit)


def _on_uncaught(exc_type: Any, exc: BaseException, tb: Any) -> None:
    try:
        session = _open
        if session is not None and session.in_this_process():
            session.finish_with(exc, tb)
    except Exception:
        pass  # the user's own error report comes first
    previous = _previous_hook if _previous_hook is not None else sys.__excepthook__
    previous(exc_type, exc, tb)


def _on_exit() -> None:
    session = _open
    if session is not None and session.in_this_process():
        session.finish_normally()
