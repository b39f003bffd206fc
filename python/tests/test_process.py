"""The run and its backend as processes: a backend that goes away, one the script starts itself,
and a script that ends (normally or by an exception) with its run open."""

import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

import dpt_tui
from dpt_tui import _launch

from .fake_backend import FakeBackend, control
from .support import BackendTest

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BackendGoneTest(BackendTest):
    def test_training_goes_on_unwatched_after_one_notice(self):
        self.backend.after_step(1, control("stop", 5))
        run = dpt_tui.init()
        self.assertFalse(run.step(loss=1.0))
        self.backend.drop()
        self.assertEqual([run.step(loss=1.0) for _ in range(5)], [False, False, False, True, True])
        self.assertFalse(run.watched)
        run.finish()
        notices = self.stderr.getvalue().splitlines()
        self.assertEqual(len(notices), 1, notices)
        self.assertRegex(
            notices[0], r"^dpt_tui: lost the connection to the dpt-tui backend \(.*\); training goes on unwatched$"
        )

    def test_a_backend_that_is_not_there_at_init_leaves_the_run_unwatched(self):
        self.backend.drop()
        run = dpt_tui.init()
        self.assertFalse(run.step())
        self.assertFalse(run.watched)
        self.assertIn("cannot reach dpt-tui at DPT_TUI_ENDPOINT=", self.stderr.getvalue())
        run.finish()

    def test_a_backend_that_refuses_the_hello_leaves_the_run_unwatched(self):
        with mock.patch.object(FakeBackend, "_answer", lambda self, m: {"type": "error", "message": "version 9 unknown"}):
            run = dpt_tui.init()
        self.assertFalse(run.watched)
        self.assertFalse(run.step())
        self.assertIn("dpt-tui refused this run: version 9 unknown", self.stderr.getvalue())
        run.finish()


# A stand-in for the dpt-tui executable: serves --endpoint, writes its arguments and every
# message it gets to $FAKE_LOG, and ends with the connection.
FAKE_BIN = textwrap.dedent(
    """\
    #!{python}
    import json, os, socket, sys
    args = sys.argv[1:]
    endpoint = args[args.index("--endpoint") + 1]
    log = open(os.environ["FAKE_LOG"], "a")
    log.write(json.dumps({{"argv": args, "session": os.getsid(0) == os.getpid()}}) + "\\n")
    server = socket.socket(socket.AF_UNIX)
    server.bind(endpoint)
    server.listen(1)
    conn, _ = server.accept()
    for line in conn.makefile("rb"):
        message = json.loads(line)
        log.write(json.dumps(message) + "\\n")
        log.flush()
        if message["type"] == "hello":
            answer = {{"type": "welcome", "version": 1, "run_dir": None, "controls": []}}
        else:
            answer = {{"type": "reply", "controls": []}}
        conn.sendall((json.dumps(answer) + "\\n").encode())
    """
)


class LaunchTest(BackendTest):
    def setUp(self) -> None:
        super().setUp()
        del os.environ["DPT_TUI_ENDPOINT"]
        self.folder = tempfile.mkdtemp(prefix="dpt-bin-")
        self.log = os.path.join(self.folder, "log.jsonl")
        os.environ["FAKE_LOG"] = self.log

    def tearDown(self) -> None:
        super().tearDown()
        for backend in _launch._started:
            backend.wait(5)  # it ends with its connection; reaped, it leaves no warning at exit

    def test_without_an_endpoint_the_script_starts_its_own_backend(self):
        binary = os.path.join(self.folder, "dpt-tui")
        with open(binary, "w") as f:
            f.write(FAKE_BIN.format(python=sys.executable))
        os.chmod(binary, stat.S_IRWXU)
        os.environ["DPT_TUI_BIN"] = binary
        run = dpt_tui.init(label="own")
        run.step(loss=1.0)
        run.finish()
        with open(self.log) as f:
            start, hello, step, finish = [json.loads(line) for line in f]
        argv = start["argv"]
        self.assertEqual(argv[:4], ["run", "--for-pid", str(os.getpid()), "--endpoint"])
        self.assertTrue(start["session"], "the backend runs in its own session")
        folder = os.path.dirname(argv[4])
        self.assertEqual(stat.S_IMODE(os.stat(folder).st_mode), 0o700)
        self.assertEqual((hello["label"], step["step"], finish["status"]), ("own", 1, "completed"))

    def test_without_an_executable_one_notice_and_the_run_goes_on_unwatched(self):
        os.environ["PATH"] = self.folder
        run = dpt_tui.init()
        self.assertFalse(run.step(loss=1.0))
        run.finish()
        self.assertIn("no dpt-tui executable on PATH", self.stderr.getvalue())
        self.assertEqual(len(self.stderr.getvalue().splitlines()), 1)


class ScriptEndTest(BackendTest):
    def _run_script(self, body: str) -> subprocess.CompletedProcess:
        folder = tempfile.mkdtemp(prefix="dpt-script-")
        script = os.path.join(folder, "train.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(body))
        env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
        return subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=20)

    def test_a_script_that_ends_with_its_run_open_completes_it(self):
        done = self._run_script(
            """\
            import dpt_tui
            run = dpt_tui.init()
            run.step(loss=1.0)
            """
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.backend.of_type("hello")[0]["label"], "train.py")
        self.assertEqual(self.backend.wait_for(lambda m: m["type"] == "finish")["status"], "completed")

    def test_an_uncaught_exception_fails_the_run_at_the_scripts_line_and_python_still_reports_it(self):
        done = self._run_script(
            """\
            import dpt_tui
            run = dpt_tui.init()
            for i in range(3):
                run.step(loss=1.0)
            x = {}["missing"]
            """
        )
        self.assertEqual(done.returncode, 1)
        self.assertIn("KeyError: 'missing'", done.stderr)  # Python's own report, from the chained hook
        finish = self.backend.wait_for(lambda m: m["type"] == "finish")
        self.assertEqual(
            finish, {"type": "finish", "step": 3, "status": "failed", "message": "KeyError: 'missing' (train.py:5)"}
        )
