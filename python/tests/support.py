"""What every test of the client shares: a fake backend in the environment, a clean process state."""

import io
import os
import unittest
from contextlib import redirect_stderr
from unittest import mock

from dpt_tui import _lifecycle, _warn

from .fake_backend import FakeBackend

_CLEARED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DPT_DISABLED", "DPT_TUI_RUN_DIR", "DPT_TUI_BIN", "DPT_TUI_ENDPOINT")


class BackendTest(unittest.TestCase):
    """Each test gets a fresh fake backend in DPT_TUI_ENDPOINT and no run left open by another."""

    def setUp(self) -> None:
        self.backend = FakeBackend()
        env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        env["DPT_TUI_ENDPOINT"] = self.backend.path
        self._env = mock.patch.dict(os.environ, env, clear=True)
        self._env.start()
        _warn._said.clear()
        self.stderr = io.StringIO()
        self._stderr = redirect_stderr(self.stderr)
        self._stderr.__enter__()

    def tearDown(self) -> None:
        self._stderr.__exit__(None, None, None)
        left = _lifecycle.current()
        if left is not None:
            left.finish("completed")
        self._env.stop()
        self.backend.close()

    def steps(self):
        return self.backend.of_type("step")
