"""The dashboard's controls as a plain loop takes them: each at its step, in order."""

import os
import time
from unittest import mock

import torch

import dpt_tui

from .fake_backend import control
from .support import BackendTest


class PauseTest(BackendTest):
    def test_a_pause_blocks_in_step_polling_until_resumed_and_is_left_out_of_step_ms(self):
        self.backend.after_step(2, control("pause", 3))
        polls = []

        def third_poll(m):
            if m["type"] == "poll":
                polls.append(m)
            return len(polls) == 3

        self.backend.when(third_poll, control("resume", 3))
        run = dpt_tui.init()
        run.step()
        run.step()
        began = time.perf_counter()
        self.assertFalse(run.step())  # step 3: paused here
        held = time.perf_counter() - began
        run.step()
        self.assertGreaterEqual(held, 0.55)
        self.assertEqual([p["step"] for p in self.backend.of_type("poll")], [3, 3, 3])
        self.assertLess(self.steps()[3]["step_ms"], 100.0)  # step 4 leaves the 0.6 s pause out
        run.finish()

    def test_a_stop_while_paused_ends_the_pause_and_the_run(self):
        self.backend.after_step(1, control("pause", 1))
        self.backend.when(lambda m: m["type"] == "poll", control("stop", 1))
        run = dpt_tui.init()
        self.assertTrue(run.step())
        self.assertTrue(run.step())
        run.finish()
        self.assertEqual(self.backend.of_type("finish")[0]["status"], "stopped")


class StopTest(BackendTest):
    def test_a_stop_returns_true_from_exactly_its_step_on(self):
        self.backend.after_step(1, control("stop", 4))
        run = dpt_tui.init()
        self.assertEqual([run.step() for _ in range(6)], [False, False, False, True, True, True])
        self.assertTrue(run.stop_requested)

    def test_controls_of_an_unknown_kind_or_shape_are_skipped(self):
        self.backend.after_step(1, control("teleport", 2), {"at_step": "soon", "control": "stop"}, control("stop", 3))
        run = dpt_tui.init()
        self.assertEqual([run.step() for _ in range(3)], [False, False, True])

    def test_controls_given_with_the_welcome_apply_before_the_first_step(self):
        self.backend.welcome_controls = [control("stop", 0)]
        run = dpt_tui.init()
        self.assertTrue(run.stop_requested)
        self.assertTrue(run.step())


class LrScaleTest(BackendTest):
    def test_the_step_uses_the_scheduled_lr_times_the_scale_and_the_schedule_keeps_its_own(self):
        param = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([param], lr=0.1)
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "lr": 0.01})
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5 ** epoch)
        run = dpt_tui.init(optimizer=opt)
        used = []
        opt.register_step_pre_hook(lambda o, a, k: used.append([g["lr"] for g in o.param_groups]))
        self.backend.after_step(1, control("lr_scale", 2, scale=3.0))
        after = []
        for _ in range(4):
            param.grad = torch.ones(2)
            opt.step()
            run.step(loss=1.0)
            schedule.step()
            after.append([g["lr"] for g in opt.param_groups])
        scale = [1.0, 1.0, 3.0, 3.0]  # set at the boundary after step 2: steps 3 and 4 use it
        for k in range(4):
            self.assertAlmostEqual(used[k][0], 0.1 * 0.5 ** k * scale[k])
            self.assertAlmostEqual(used[k][1], 0.01 * 0.5 ** k * scale[k])
            self.assertEqual(after[k], [0.1 * 0.5 ** (k + 1), 0.01 * 0.5 ** (k + 1)])
            self.assertEqual(self.steps()[k]["lr"], used[k][0])
        run.finish()
        opt.step()
        self.assertEqual(used[-1], [0.1 * 0.5 ** 4, 0.01 * 0.5 ** 4])  # hooks removed with the run

    def test_a_loop_that_sets_lr_itself_is_scaled_and_gets_its_lr_back_exactly(self):
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], lr=1.0)
        self.backend.after_step(1, control("lr_scale", 1, scale=0.3))
        run = dpt_tui.init(optimizer=opt)
        for lr in (6e-4, 5.9e-4, 5.8e-4):
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
            run.step()
            self.assertEqual(opt.param_groups[0]["lr"], lr)
        self.assertEqual([m["lr"] for m in self.steps()], [6e-4, 5.9e-4 * 0.3, 5.8e-4 * 0.3])
        run.finish()


class SaveTest(BackendTest):
    def test_a_save_calls_the_scripts_function_and_reports_its_path(self):
        calls = []
        self.backend.after_step(1, control("save", 2))
        self.backend.after_step(2, control("save", 2))
        run = dpt_tui.init(save=lambda: calls.append(1) or ("ckpt.pt" if len(calls) == 1 else None))
        for _ in range(3):
            run.step()
        self.assertEqual(len(calls), 2)
        self.assertEqual(
            self.backend.of_type("saved"),
            [
                {"type": "saved", "step": 2, "path": os.path.abspath("ckpt.pt")},
                {"type": "saved", "step": 2, "path": None},
            ],
        )
        run.finish()

    def test_a_save_that_raises_is_reported_and_training_goes_on(self):
        def save():
            raise OSError("disk full")  # the save's line

        self.backend.after_step(1, control("save", 1))
        run = dpt_tui.init(save=save)
        self.assertFalse(run.step())
        self.assertFalse(run.step())
        (failed,) = self.backend.of_type("save_failed")
        self.assertEqual(failed["step"], 1)
        line = _line_of("# the save's line")
        self.assertEqual(failed["message"], f"OSError: disk full (test_steering.py:{line})")
        self.assertIn("the save asked from the dashboard failed at step 1", self.stderr.getvalue())
        self.assertEqual(len(self.steps()), 2)
        run.finish()

    def test_ranks_other_than_zero_do_not_save(self):
        calls = []
        self.backend.after_step(1, control("save", 1))
        with mock.patch.dict(os.environ, {"RANK": "1", "WORLD_SIZE": "2"}):
            run = dpt_tui.init(save=lambda: calls.append(1))
        run.step()
        run.step()
        self.assertEqual(calls, [])
        self.assertEqual(self.backend.of_type("saved"), [])
        self.assertIn("save", self.backend.of_type("hello")[0]["can"])
        run.finish()


def _line_of(text: str) -> int:
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if text in line and "_line_of(" not in line:
                return number
    raise AssertionError(text)
