"""One rank's link to the backend: a JSON line out, exactly one JSON line back.

A failure of the link (the backend gone, an answer that is not JSON) is said once on stderr and
the link goes quiet: every later request answers with no controls, so the training goes on
unwatched. The training never ends because its monitor did.
"""

import json
import socket
import struct
from typing import Any, Dict, Optional, Sequence

from ._warn import warn_once

# Longer than any answer of a working backend takes; bounds how long a hung one holds the training.
REPLY_TIMEOUT_S = 120.0

_NO_CONTROLS: Sequence[Any] = ()
_encode = json.JSONEncoder(separators=(",", ":")).encode
_decode = json.loads


class Refused(Exception):
    """The backend answered `hello` with an `error`: it will not watch this run."""


class Connection:
    """A connected Unix socket speaking the script protocol, or a quiet stand-in once it failed."""

    __slots__ = ("_sock", "_reader")

    def __init__(self, sock: Optional[socket.socket]) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb") if sock is not None else None
        if sock is not None:
            _limit_waits(sock, REPLY_TIMEOUT_S)

    @property
    def alive(self) -> bool:
        return self._sock is not None

    def hello(self, message: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Send `hello`; the `welcome`, or `None` (said on stderr) when the backend refused or failed."""
        answer = self._exchange(message)
        if answer is None:
            return None
        if answer.get("type") == "error":
            warn_once("refused", f"dpt-tui refused this run: {answer.get('message')}; training goes on unwatched")
            self.close()
            return None
        return answer

    def request(self, message: Dict[str, Any]) -> Sequence[Any]:
        """Send a request; the controls of its answer (none once the link failed)."""
        if self._sock is None:
            return _NO_CONTROLS
        answer = self._exchange(message)
        if answer is None:
            return _NO_CONTROLS
        controls = answer.get("controls")
        if answer.get("type") == "error":
            # An older backend that does not know this request; the link goes on.
            kind = message.get("type")
            warn_once(f"error:{kind}", f"dpt-tui did not take a {kind} message: {answer.get('message')}")
        return controls if isinstance(controls, list) else _NO_CONTROLS

    def close(self) -> None:
        sock, reader = self._sock, self._reader
        self._sock = self._reader = None
        for part in (reader, sock):
            if part is not None:
                try:
                    part.close()
                except OSError:
                    pass

    def _exchange(self, message: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        try:
            self._sock.sendall((_encode(message) + "\n").encode())
            line = self._reader.readline()
        except (OSError, ValueError, AttributeError) as e:
            return self._lost(f"{type(e).__name__}: {e}")
        if not line.endswith(b"\n"):
            return self._lost(f"it closed the connection or gave no answer within {REPLY_TIMEOUT_S:.0f} s")
        try:
            answer = _decode(line)
        except ValueError:
            return self._lost(f"it answered something that is not JSON: {line[:80]!r}")
        if not isinstance(answer, dict):
            return self._lost(f"it answered something that is not a JSON object: {line[:80]!r}")
        return answer

    def _lost(self, why: str) -> None:
        self.close()
        warn_once("lost", f"lost the connection to the dpt-tui backend ({why}); training goes on unwatched")
        return None


def _limit_waits(sock: socket.socket, seconds: float) -> None:
    """Bound each send and receive in the kernel (SO_SNDTIMEO, SO_RCVTIMEO) on a blocking socket.

    `socket.settimeout` would do the same with a poll() before every receive, which costs a
    fifth of a step's round trip; a receive that runs out now reads as an unfinished line.
    """
    limit = struct.pack("@ll", int(seconds), 0)
    for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, limit)
        except OSError:
            pass  # no limit where the platform takes none: a hung backend holds the training
