"""`dpt_tui.Animator` keeps X and Y as d2l's does and reports each add to the dashboard."""

import os
from unittest import mock

import torch

import dpt_tui

from .support import BackendTest


class AnimatorDataTest(BackendTest):
    def test_x_and_y_are_kept_as_d2l_keeps_them(self):
        animator = dpt_tui.Animator(xlabel="epoch", xlim=[1, 10], legend=["train loss", "train acc", "test acc"])
        self.assertIsNone(animator.X)
        self.assertIsNone(animator.Y)
        animator.add(0.5, (1.2, 0.4, None))
        animator.add(1, (None, None, 0.5))
        animator.add([1.5, 1.5, 1.5], [0.9, 0.6, None])
        self.assertEqual(animator.X, [[0.5, 1.5], [0.5, 1.5], [1]])
        self.assertEqual(animator.Y, [[1.2, 0.9], [0.4, 0.6], [0.5]])
        self.assertEqual(animator.Y[0][-1], 0.9)
        single = dpt_tui.Animator()
        single.add(1, 3.0)
        self.assertEqual((single.X, single.Y), ([[1]], [[3.0]]))
        self.assertEqual(animator.fmts, ("-", "m--", "g-.", "r:"))


class AnimatorReportTest(BackendTest):
    def test_the_seeds_animator_reports_each_test_accuracy_as_a_step_and_an_eval(self):
        animator = dpt_tui.Animator("eopch", "test_acc", xlim=[1, 10])
        for epoch in range(3):
            animator.add(epoch + 1, (0.5 + epoch / 10,))
        self.assertAlmostEqual(animator.Y[0][-1], 0.7)
        hello = self.backend.of_type("hello")[0]
        self.assertEqual((hello["framework"], hello["can"]), ("animator", ["pause", "stop"]))
        self.assertTrue(hello["label"].endswith(": test_acc"), hello["label"])
        self.assertEqual([(s["step"], s["scalars"]) for s in self.steps()], [
            (1, {"epoch": 1, "test_acc": 0.5}), (2, {"epoch": 2, "test_acc": 0.6}), (3, {"epoch": 3, "test_acc": 0.7}),
        ])
        self.assertEqual([(e["step"], e["metrics"]) for e in self.backend.of_type("eval")],
                         [(1, {"test_acc": 0.5}), (2, {"test_acc": 0.6}), (3, {"test_acc": 0.7})])

    def test_train_curves_are_steps_and_a_test_only_add_is_an_eval_at_the_current_step(self):
        animator = dpt_tui.Animator(xlabel="epoch", legend=["train loss", "train acc", "test acc"])
        animator.add(0.5, (torch.tensor(1.25), 0.4, None))
        animator.add(1.0, (1.0, 0.5, None))
        animator.add(1.0, (None, None, 0.55))
        steps = self.steps()
        self.assertEqual([(s["step"], s["loss"], s["acc"]) for s in steps], [(1, 1.25, 0.4), (2, 1.0, 0.5)])
        self.assertEqual(steps[0]["scalars"], {"epoch": 0.5, "train loss": 1.25, "train acc": 0.4})
        self.assertEqual(self.backend.of_type("eval"), [{"type": "eval", "step": 2, "metrics": {"test acc": 0.55}}])

    def test_a_new_animator_in_the_same_script_finishes_the_previous_run(self):
        dpt_tui.Animator(legend=["train loss"]).add(1, 1.0)
        dpt_tui.Animator(legend=["train loss"]).add(1, 2.0)
        self.assertEqual(len(self.backend.of_type("hello")), 2)
        self.assertEqual([f["status"] for f in self.backend.of_type("finish")], ["completed"])

    def test_a_disabled_animator_keeps_its_curves_and_sends_nothing(self):
        with mock.patch.dict(os.environ, {"DPT_DISABLED": "1"}):
            animator = dpt_tui.Animator(legend=["train loss"])
            self.assertFalse(animator.add(1, 0.5))
        self.assertEqual(animator.Y, [[0.5]])
        self.assertEqual(self.backend.connections, 0)

    def test_an_animator_beside_the_scripts_own_run_only_keeps_its_curves(self):
        run = dpt_tui.init(label="own")
        animator = dpt_tui.Animator(legend=["train loss"])
        animator.add(1, 0.5)
        self.assertEqual(animator.Y, [[0.5]])
        self.assertEqual([h["label"] for h in self.backend.of_type("hello")], ["own"])
        run.finish()
