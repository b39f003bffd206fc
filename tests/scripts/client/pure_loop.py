"""A loop without torch (the client needs none): gradient steps on w*w, each step's number written
to OUT (one JSON line each), until the dashboard stops it. Run by tests/python_wheel.rs with the
wheel `pip install ./python` builds, started with plain `python` (init starts the backend)."""
import json
import sys
import time

import dpt_tui

out = open(sys.argv[1], "w")
w, lr, step = 5.0, 0.01, 0
with dpt_tui.init(config={"lr": lr}, label="pure") as run:
    while True:
        w -= lr * 2 * w
        step += 1
        out.write(json.dumps({"step": step, "lr": lr}) + "\n")
        out.flush()
        # The work of a real step, so the loop runs for as long as the test steers it.
        time.sleep(0.002)
        if run.step(loss=w * w, samples=1):
            break
out.write(json.dumps({"stopped_at": step}) + "\n")
out.close()
