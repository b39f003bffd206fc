"""The one line that tells the dashboard why a run failed: `ExcType: message (file.py:LINE)`.

The line points at the innermost frame of the user's own code: a frame of the standard library,
of an installed package or of dpt_tui itself says less about what to fix.
"""

import os
import sys
import sysconfig
import traceback
from types import TracebackType
from typing import Optional, Tuple

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_MAX_MESSAGE = 300


def describe(exc: BaseException, tb: Optional[TracebackType] = None) -> str:
    """`ExcType: first line of the message (file.py:LINE)`, one line."""
    text = str(exc).strip().splitlines()
    head = type(exc).__name__ + (f": {text[0]}" if text else "")
    if len(head) > _MAX_MESSAGE:
        head = head[: _MAX_MESSAGE - 3] + "..."
    where = _user_frame(tb if tb is not None else exc.__traceback__)
    if where is None:
        return head
    return f"{head} ({os.path.basename(where[0])}:{where[1]})"


def _user_frame(tb: Optional[TracebackType]) -> Optional[Tuple[str, int]]:
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(tb)] if tb is not None else []
    for filename, line in reversed(frames):
        if _is_users(filename):
            return filename, line
    for filename, line in reversed(frames):
        if not _is_ours(filename):
            return filename, line
    return frames[-1] if frames else None


def _is_ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OWN_DIR + os.sep)


def _library_dirs() -> Tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


_LIBRARIES = _library_dirs()


def _is_users(filename: str) -> bool:
    if filename.startswith("<") and not filename.startswith(("<ipython-input", "<stdin>")):
        return False  # frozen modules, <string> of exec
    path = os.path.abspath(filename)
    return not _is_ours(filename) and not path.startswith(_LIBRARIES)
