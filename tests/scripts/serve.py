"""Runs the scripts of tests/scripts for one test binary in one long-lived Python process, so
torch is imported once per binary instead of once per script (about 2.5 s of CPU each).

Reads one JSON request per line from stdin, {"script": PATH, "args": [...]}, runs the script as
`python PATH ARGS...` would (as `__main__`, with that `sys.argv`), and writes one JSON line back:
{"code": exit status, "stdout": what it printed, "stderr": what it wrote to stderr}. What a script
changes of torch's global state that a fresh process would not have (the thread count, the
default dtype, gradient mode) is put back after each.
"""
import contextlib
import io
import json
import runpy
import sys
import traceback

import torch

THREADS = torch.get_num_threads()


def run(script, args):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    sys.argv = [script, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if isinstance(e.code, int):
                code = e.code
            elif e.code is not None:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
            traceback.print_exc()
            code = 1
    torch.set_num_threads(THREADS)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main():
    for line in sys.stdin:
        request = json.loads(line)
        reply = run(request["script"], request["args"])
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
