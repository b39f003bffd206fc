"""What one `run.step()` costs a training loop, the round trip to the backend included.

A fake backend answers on a Unix socket, in a thread of this process (as asked of the client:
the round trip then also pays for switching threads under the GIL) and in a process of its own (as
the real dpt-tui backend is). Prints the mean microseconds per call, and the cost under
DPT_DISABLED=1.

    python python/bench_overhead.py [--steps N]

Under `dpt-tui run --headless -- python python/bench_overhead.py`, it times the real backend
(the run's own `DPT_TUI_ENDPOINT`) instead, beside the disabled client.
"""

import argparse
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dpt_tui  # noqa: E402
from dpt_tui import _lifecycle  # noqa: E402

_REPLY = b'{"type":"reply","controls":[]}\n'
_WELCOME = b'{"type":"welcome","version":1,"run_dir":null,"controls":[]}\n'


def serve(server: socket.socket) -> None:
    """Answer every request of one connection as the backend does (parsing each, as it must)."""
    conn, _ = server.accept()
    reader = conn.makefile("rb")
    for line in reader:
        message = json.loads(line)
        conn.sendall(_WELCOME if message["type"] == "hello" else _REPLY)
    conn.close()


def listening(folder: str) -> tuple:
    path = os.path.join(folder, "socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    return server, path


def time_steps(steps: int, **figures) -> float:
    """Microseconds per step() call of a run opened on DPT_TUI_ENDPOINT, after a warm-up."""
    run = dpt_tui.init(label="bench")
    for _ in range(min(1000, steps)):
        run.step(**figures)
    began = time.perf_counter()
    for _ in range(steps):
        run.step(**figures)
    spent = time.perf_counter() - began
    run.finish()
    return spent / steps * 1e6


def with_backend(kind: str, steps: int, figures: dict) -> float:
    folder = tempfile.mkdtemp(prefix="dpt-bench-")
    server, path = listening(folder)
    if kind == "thread":
        backend = threading.Thread(target=serve, args=(server,), daemon=True)
    else:
        backend = multiprocessing.get_context("fork").Process(target=serve, args=(server,), daemon=True)
    backend.start()
    os.environ["DPT_TUI_ENDPOINT"] = path
    try:
        return time_steps(steps, **figures)
    finally:
        del os.environ["DPT_TUI_ENDPOINT"]
        backend.join(5)
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    steps = parser.parse_args().steps
    floats = {"loss": 2.31, "acc": 0.42, "samples": 256, "grad_norm": 1.7}
    cases = [("floats", floats)]
    try:
        import torch

        cases.append(("0-d tensor loss", dict(floats, loss=torch.tensor(2.31))))
    except ImportError:
        pass
    print(f"run.step() cost, mean of {steps} calls (loss, acc, samples, one scalar):")
    if os.environ.get("DPT_TUI_ENDPOINT"):
        for name, figures in cases:
            print(f"  dpt-tui run's backend    {name:<16} {time_steps(steps, **figures):7.1f} us/call")
        del os.environ["DPT_TUI_ENDPOINT"]
        os.environ["DPT_DISABLED"] = "1"
        print(f"  DPT_DISABLED=1                             {time_steps(steps, **floats):7.2f} us/call")
        return
    for kind in ("thread", "process"):
        for name, figures in cases:
            print(f"  backend in a {kind:<7}  {name:<16} {with_backend(kind, steps, figures):7.1f} us/call")
    os.environ["DPT_DISABLED"] = "1"
    print(f"  DPT_DISABLED=1                             {time_steps(steps, **floats):7.2f} us/call")
    assert _lifecycle.current() is None


if __name__ == "__main__":
    main()
