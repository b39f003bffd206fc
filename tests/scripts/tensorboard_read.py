"""Reads a run's TensorBoard event files with TensorBoard's own reader and prints what it found
as JSON: every scalar tag's (step, value) pairs and the hyperparameters of the HParams plugin's
session start. `python tensorboard_read.py RUN/tensorboard`.
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def main():
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {
        tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
    }
    hparams = {}
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for key, value in data.session_start_info.hparams.items():
            kind = value.WhichOneof("kind")
            hparams[key] = getattr(value, kind)
    print(json.dumps({"scalars": scalars, "hparams": hparams}))


main()
