"""Finding the backend: the socket `dpt-tui run` named, or a backend this process starts itself.

Under `dpt-tui run -- CMD` the socket is in `DPT_TUI_ENDPOINT`. A script started on its own starts
`dpt-tui run --for-pid PID --endpoint PATH` (the executable from `DPT_TUI_BIN`, else `dpt-tui` on
PATH) in its own session, with the socket in a fresh owner-only folder, and waits for it to accept.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

from ._warn import warn_once

ENDPOINT_ENV = "DPT_TUI_ENDPOINT"
RUN_DIR_ENV = "DPT_TUI_RUN_DIR"
BIN_ENV = "DPT_TUI_BIN"
START_TIMEOUT_S = 10.0
_RETRY_S = 0.05

# The backends this process started: held so that they are not reaped (and warned about) as garbage.
_started: List[subprocess.Popen] = []


def connect_backend() -> Optional[socket.socket]:
    """A socket connected to the backend, or `None` (said on stderr) to run unwatched."""
    endpoint = os.environ.get(ENDPOINT_ENV)
    if endpoint:
        try:
            return _connect(endpoint)
        except OSError as e:
            warn_once("connect", f"cannot reach dpt-tui at {ENDPOINT_ENV}={endpoint} ({e}); training goes on unwatched")
            return None
    executable = _executable()
    if executable is None:
        return None
    return _start(executable)


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def _executable() -> Optional[str]:
    named = os.environ.get(BIN_ENV)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        warn_once("no-bin", f"{BIN_ENV}={named} is not an executable file; training goes on unwatched")
        return None
    found = shutil.which("dpt-tui")
    if found is None:
        warn_once(
            "no-bin",
            "no dpt-tui executable on PATH (or in DPT_TUI_BIN): training goes on unwatched; "
            "start the script with 'dpt-tui run -- python SCRIPT' to watch it",
        )
    return found


def _start(executable: str) -> Optional[socket.socket]:
    folder = tempfile.mkdtemp(prefix="dpt-tui-")  # mode 0700
    endpoint = os.path.join(folder, "socket")
    command: List[str] = [executable, "run", "--for-pid", str(os.getpid()), "--endpoint", endpoint]
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        command += ["--run-dir", run_dir]
    try:
        with open(os.path.join(folder, "backend.log"), "ab") as log:
            backend = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
    except OSError as e:
        warn_once("start", f"cannot start {executable} ({e}); training goes on unwatched")
        return None
    _started.append(backend)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return _connect(endpoint)
        except OSError:
            pass
        if backend.poll() is not None:
            warn_once("start", f"{executable} ended with status {backend.returncode} before it listened "
                      f"(see {folder}/backend.log); training goes on unwatched")
            return None
        if time.monotonic() >= deadline:
            backend.terminate()
            try:
                backend.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
            warn_once("start", f"{executable} did not listen on {endpoint} within {START_TIMEOUT_S:.0f} s "
                      f"(see {folder}/backend.log); training goes on unwatched")
            return None
        time.sleep(_RETRY_S)
