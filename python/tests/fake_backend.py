"""A dpt-tui backend in a thread, for the tests: it answers every request as the script protocol
says, keeps every message it received, and answers chosen requests with scripted controls."""

import json
import os
import shutil
import socket
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

Message = Dict[str, Any]
KNOWN = {"step", "poll", "eval", "saved", "save_failed", "finish"}


class FakeBackend:
    """Serves `self.path` until `close()`; one thread per connection."""

    def __init__(self, run_dir: str = "/tmp/dpt-tui-fake-run", welcome_controls: Optional[List[Message]] = None):
        self.folder = tempfile.mkdtemp(prefix="dpt-fake-")
        self.path = os.path.join(self.folder, "socket")
        self.run_dir = run_dir
        self.welcome_controls = welcome_controls or []
        self.messages: List[Message] = []
        self.connections = 0
        self._rules: List[List[Any]] = []
        self._open: List[socket.socket] = []
        self._changed = threading.Condition()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(8)
        threading.Thread(target=self._accept, name="fake-backend", daemon=True).start()

    def when(self, matches: Callable[[Message], bool], *controls: Message) -> None:
        """Answer the first request that `matches` with `controls` (after earlier rules)."""
        with self._changed:
            self._rules.append([matches, list(controls)])

    def after_step(self, step: int, *controls: Message) -> None:
        self.when(lambda m: m["type"] == "step" and m["step"] == step, *controls)

    def of_type(self, kind: str) -> List[Message]:
        with self._changed:
            return [m for m in self.messages if m["type"] == kind]

    def wait_for(self, matches: Callable[[Message], bool], timeout: float = 5.0) -> Message:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for m in self.messages:
                    if matches(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such message; got {self.messages}")
                self._changed.wait(left)

    def drop(self) -> None:
        """Go away: close every connection and stop listening, as a killed backend would."""
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
        except OSError:
            pass
        self._server.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        with self._changed:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()

    def close(self) -> None:
        self.drop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._changed:
                self.connections += 1
                self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            for line in reader:
                message = json.loads(line)
                with self._changed:
                    self.messages.append(message)
                    self._changed.notify_all()
                conn.sendall((json.dumps(self._answer(message)) + "\n").encode())
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def _answer(self, message: Message) -> Message:
        kind = message.get("type")
        if kind == "hello":
            return {"type": "welcome", "version": 1, "run_dir": self.run_dir, "controls": self.welcome_controls}
        if kind not in KNOWN:
            return {"type": "error", "message": f"unknown request {kind!r}"}
        with self._changed:
            for rule in self._rules:
                if rule[0](message):
                    self._rules.remove(rule)
                    return {"type": "reply", "controls": rule[1]}
        return {"type": "reply", "controls": []}


def control(kind: str, at_step: int, **fields: Any) -> Message:
    return {"at_step": at_step, "control": kind, **fields}
