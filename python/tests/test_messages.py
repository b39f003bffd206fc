"""What a plain run sends: hello, step, eval, finish, exactly as the script protocol says."""

import math
import os
import socket
import sys
import threading
from unittest import mock

import torch

import dpt_tui
from dpt_tui import _lifecycle
from dpt_tui._identity import script_label

from .support import BackendTest


class HelloTest(BackendTest):
    def test_hello_says_who_the_rank_is_and_what_it_can_do(self):
        run = dpt_tui.init(config={"lr": 0.1, "epochs": 3}, label="lenet", total_steps=30)
        hello = self.backend.wait_for(lambda m: m["type"] == "hello")
        self.assertEqual(
            {k: hello[k] for k in ("version", "rank", "world_size", "local_rank", "label", "framework", "config",
                                   "can", "total_steps")},
            {
                "version": 1, "rank": 0, "world_size": 1, "local_rank": 0, "label": "lenet", "framework": "plain",
                "config": {"lr": 0.1, "epochs": 3}, "can": ["pause", "stop"], "total_steps": 30,
            },
        )
        self.assertEqual(hello["pid"], os.getpid())
        self.assertEqual(hello["host"], socket.gethostname())
        self.assertEqual(hello["devices"], [{"kind": "cpu", "index": None, "name": None, "uuid": None}])
        self.assertEqual(run.run_dir, self.backend.run_dir)
        self.assertTrue(run.watched)
        run.finish()

    def test_ranks_come_from_torchruns_environment_and_the_optimizer_and_save_add_controls(self):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        with mock.patch.dict(os.environ, {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}):
            run = dpt_tui.init(optimizer=opt, save=lambda: None)
        hello = self.backend.wait_for(lambda m: m["type"] == "hello")
        self.assertEqual((hello["rank"], hello["world_size"], hello["local_rank"]), (3, 4, 1))
        self.assertEqual(hello["can"], ["pause", "stop", "lr", "save"])
        self.assertEqual(hello["label"], script_label())
        run.finish()


class StepTest(BackendTest):
    def test_each_step_reports_its_figures_and_a_finish_ends_the_run_once(self):
        run = dpt_tui.init()
        self.assertFalse(run.step(loss=torch.tensor(2.5, requires_grad=True), acc=0.5, samples=64, grad_norm=1.0))
        self.assertFalse(run.step(loss=math.nan, samples=64.0))
        run.eval(val_loss=1.0, val_acc=torch.tensor(0.75))
        run.finish()
        run.finish()
        first, second = self.steps()
        self.assertEqual(
            {k: first[k] for k in ("step", "loss", "acc", "samples", "lr", "scalars")},
            {"step": 1, "loss": 2.5, "acc": 0.5, "samples": 64, "lr": None, "scalars": {"grad_norm": 1.0}},
        )
        self.assertGreaterEqual(first["step_ms"], 0.0)
        self.assertEqual((second["step"], second["loss"], second["acc"], second["samples"]), (2, None, None, 64))
        self.assertEqual(self.backend.of_type("eval"),
                         [{"type": "eval", "step": 2, "metrics": {"val_loss": 1.0, "val_acc": 0.75}}])
        self.assertEqual(
            self.backend.of_type("finish"), [{"type": "finish", "step": 2, "status": "completed", "message": None}]
        )
        self.assertFalse(run.step(loss=1.0))  # after finish: nothing sent
        self.assertEqual(len(self.steps()), 2)

    def test_step_ms_is_the_wall_time_since_the_previous_step(self):
        run = dpt_tui.init()
        threading.Event().wait(0.05)
        run.step()
        threading.Event().wait(0.02)
        run.step()
        first, second = self.steps()
        self.assertGreaterEqual(first["step_ms"], 50.0)
        self.assertGreaterEqual(second["step_ms"], 20.0)
        self.assertLess(second["step_ms"], 45.0)
        run.finish()

    def test_bad_values_raise_one_line_and_send_nothing(self):
        run = dpt_tui.init()
        with self.assertRaises(TypeError) as caught:
            run.step(loss="abc")
        self.assertEqual(str(caught.exception), "loss must be a number or a 0-d tensor, got str 'abc'")
        with self.assertRaises(TypeError) as caught:
            run.step(loss=1.0, weights=[1, 2])
        self.assertEqual(str(caught.exception), "weights must be a number or a 0-d tensor, got list [1, 2]")
        with self.assertRaises(TypeError):
            run.eval(val_acc=torch.ones(2))
        self.assertEqual(self.steps(), [])
        self.assertEqual(run.steps, 0)
        run.finish()

    def test_an_exception_leaving_the_with_block_finishes_the_run_failed_at_the_scripts_line(self):
        with self.assertRaises(ValueError):
            with dpt_tui.init() as run:
                run.step(loss=1.0)
                raise ValueError("bad batch")  # the failing line
        (finish,) = self.backend.of_type("finish")
        self.assertEqual(finish["status"], "failed")
        self.assertEqual(finish["message"], f"ValueError: bad batch (test_messages.py:{_line_of('# the failing line')})")

    def test_a_with_block_that_ends_normally_completes_the_run(self):
        with dpt_tui.init() as run:
            run.step(loss=1.0)
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "completed")


class OneRunTest(BackendTest):
    def test_a_second_init_in_a_script_is_refused(self):
        run = dpt_tui.init(label="first")
        with self.assertRaises(RuntimeError) as caught:
            dpt_tui.init(label="second")
        self.assertEqual(
            str(caught.exception), "a dpt_tui run is already open in this process (first); call run.finish() first"
        )
        run.finish()
        dpt_tui.init(label="third").finish()
        self.assertEqual([m["label"] for m in self.backend.of_type("hello")], ["first", "third"])

    def test_a_notebook_running_its_cell_again_stops_the_old_run_and_starts_a_new_one(self):
        with mock.patch.object(sys, "ps1", ">>> ", create=True):
            dpt_tui.init(label="first")
            run = dpt_tui.init(label="second")
        self.assertEqual(self.backend.of_type("finish"),
                         [{"type": "finish", "step": 0, "status": "stopped", "message": None}])
        self.assertEqual([m["label"] for m in self.backend.of_type("hello")], ["first", "second"])
        run.finish()

    def test_an_uncaught_exception_fails_the_run_and_the_previous_hook_still_runs(self):
        run = dpt_tui.init()
        seen = []
        with mock.patch.object(_lifecycle, "_previous_hook", lambda *a: seen.append(a[0])):
            try:
                1 / 0  # the uncaught line
            except ZeroDivisionError as e:
                sys.excepthook(type(e), e, e.__traceback__)
        self.assertIs(sys.excepthook, _lifecycle._on_uncaught)
        self.assertEqual(seen, [ZeroDivisionError])
        (finish,) = self.backend.of_type("finish")
        self.assertEqual(
            finish["message"],
            f"ZeroDivisionError: division by zero (test_messages.py:{_line_of('# the uncaught line')})",
        )
        self.assertFalse(run.watched)


class DisabledTest(BackendTest):
    def test_a_disabled_run_does_nothing_at_all(self):
        threads = threading.active_count()
        with mock.patch.dict(os.environ, {"DPT_DISABLED": "1"}):
            run = dpt_tui.init(optimizer="not even an optimizer")
            self.assertFalse(run.step(loss="not even a number"))
            run.eval(x=1)
            run.finish()
            with dpt_tui.init() as again:
                again.step()
        self.assertEqual(threading.active_count(), threads)
        self.assertEqual(self.backend.connections, 0)
        self.assertIsNone(_lifecycle.current())
        self.assertEqual(repr(run), "<dpt_tui.Run disabled>")


def _line_of(text: str) -> int:
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if text in line and "_line_of(" not in line:
                return number
    raise AssertionError(text)
