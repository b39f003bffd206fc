"""Reading figures and configurations, naming GPUs, describing failures: no backend needed."""

import argparse
import dataclasses
import json
import math
import sys
import unittest
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch

from dpt_tui._failure import describe
from dpt_tui._identity import current_device, nvml_uuid
from dpt_tui._values import config_object, count, number, readable


class NumberTest(unittest.TestCase):
    def test_numbers_numpy_scalars_and_one_element_tensors_are_read(self):
        self.assertEqual(number(3, "loss"), 3)
        self.assertEqual(number(0.25, "loss"), 0.25)
        self.assertIsNone(number(None, "loss"))
        self.assertEqual(number(np.float32(0.5), "loss"), 0.5)
        self.assertEqual(number(np.int64(7), "samples"), 7)
        self.assertEqual(number(torch.tensor(1.5), "loss"), 1.5)
        self.assertEqual(number(torch.tensor(2.5, requires_grad=True), "loss"), 2.5)
        self.assertEqual(number(np.array(4.0), "loss"), 4.0)
        self.assertEqual(count(64.0, "samples"), 64)
        self.assertIs(type(count(64.0, "samples")), int)

    def test_values_that_are_not_finite_become_null(self):
        for bad in (math.nan, math.inf, -math.inf, np.float64("nan"), torch.tensor(float("inf"))):
            self.assertIsNone(number(bad, "loss"), bad)

    def test_anything_else_is_refused_in_one_line_naming_the_argument(self):
        cases = {
            "abc": "loss must be a number or a 0-d tensor, got str 'abc'",
            (1, 2): "loss must be a number or a 0-d tensor, got tuple (1, 2)",
            True: "loss must be a number or a 0-d tensor, got bool True",
        }
        for value, line in cases.items():
            with self.assertRaises(TypeError) as caught:
                number(value, "loss")
            self.assertEqual(str(caught.exception), line)
        with self.assertRaises(TypeError) as caught:
            number([1, 2], "acc")
        self.assertEqual(str(caught.exception), "acc must be a number or a 0-d tensor, got list [1, 2]")
        with self.assertRaises(TypeError) as caught:
            number(torch.ones(3, 4), "loss")
        self.assertEqual(
            str(caught.exception),
            "loss must be a number or a 0-d tensor, got a Tensor of shape (3, 4): "
            "reduce it to one number first (e.g. .mean() or .item())",
        )
        self.assertNotIn("\n", str(caught.exception))

    def test_a_frameworks_metrics_keep_what_reads_as_a_number(self):
        got = readable({"loss": torch.tensor(0.5), "name": "x", "hist": torch.ones(3), "epoch": 2})
        self.assertEqual(got, {"loss": 0.5, "epoch": 2})


class ConfigTest(unittest.TestCase):
    def test_dicts_namespaces_and_dataclasses_become_json_objects(self):
        @dataclasses.dataclass
        class Settings:
            lr: float = 0.1
            layers: tuple = (1, 2)

        self.assertEqual(config_object(None), {})
        self.assertEqual(config_object(Settings()), {"lr": 0.1, "layers": [1, 2]})
        self.assertEqual(config_object(argparse.Namespace(batch=64, name="x")), {"batch": 64, "name": "x"})
        odd = config_object(
            {"nan": math.nan, 3: torch.tensor(2.0), "dev": torch.device("cpu"), "nested": {"a": [np.int32(1)]}}
        )
        self.assertEqual(odd, {"nan": None, "3": 2.0, "dev": "device(type='cpu')", "nested": {"a": [1]}})
        json.dumps(odd, allow_nan=False)

    def test_anything_else_is_refused(self):
        with self.assertRaises(TypeError) as caught:
            config_object([1, 2])
        self.assertEqual(
            str(caught.exception), "config must be a dict, an argparse.Namespace or a dataclass, got list [1, 2]"
        )


class UuidTest(unittest.TestCase):
    def test_uuids_are_written_as_nvml_writes_them(self):
        want = "GPU-0123abcd-4567-89ab-cdef-0123456789ab"
        self.assertEqual(nvml_uuid("0123abcd-4567-89ab-cdef-0123456789ab"), want)
        self.assertEqual(nvml_uuid("GPU-0123ABCD-4567-89ab-cdef-0123456789ab"), want)

        class Raw:
            bytes = list(bytes.fromhex("0123abcd456789abcdef0123456789ab"))

        self.assertEqual(nvml_uuid(Raw()), want)
        self.assertIsNone(nvml_uuid("not a uuid"))
        self.assertIsNone(nvml_uuid(None))


class DeviceTest(unittest.TestCase):
    def test_the_current_cuda_device_is_named_with_its_nvml_uuid(self):
        props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid="0123abcd-4567-89ab-cdef-0123456789ab")
        cuda = SimpleNamespace(is_available=lambda: True, current_device=lambda: 1, get_device_properties=lambda i: props)
        with mock.patch.dict(sys.modules, {"torch": SimpleNamespace(cuda=cuda)}):
            self.assertEqual(current_device(), {
                "kind": "cuda", "index": 1, "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-0123abcd-4567-89ab-cdef-0123456789ab",
            })

    def test_without_torch_imported_the_device_is_the_cpu(self):
        with mock.patch.dict(sys.modules, {"torch": None}):
            self.assertEqual(current_device()["kind"], "cpu")


class DescribeTest(unittest.TestCase):
    def test_the_line_names_the_users_innermost_frame(self):
        try:
            json.loads("{oops")  # the error is raised inside the standard library
        except ValueError as e:
            line = describe(e)
        self.assertTrue(line.startswith("JSONDecodeError: Expecting property name"), line)
        where = _line_of("the error is raised inside the standard library")
        self.assertTrue(line.endswith(f"(test_values.py:{where})"), line)

    def test_a_message_of_several_lines_keeps_its_first(self):
        try:
            raise RuntimeError("first\nsecond")
        except RuntimeError as e:
            line = describe(e)
        self.assertRegex(line, r"^RuntimeError: first \(test_values\.py:\d+\)$")


def _line_of(text: str) -> int:
    with open(__file__) as source:
        for number_, line in enumerate(source, 1):
            if text in line and "_line_of(" not in line:
                return number_
    raise AssertionError(text)


if __name__ == "__main__":
    unittest.main()
