"""Reads a run's TensorBoard event files with TensorBoard's own reader and prints what it found
as JSON: every scalar tag's (step, value) pairs, the hyperparameters of the HParams plugin's
session start, its session end's status, and a sweep's experiment (its hyperparameters with
their type and values, its metric tags). `python tensorboard_read.py RUN/tensorboard`.
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2


def main():
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {
        tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
    }
    hparams, status, experiment = {}, None, None
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for key, value in data.session_start_info.hparams.items():
            kind = value.WhichOneof("kind")
            hparams[key] = getattr(value, kind)
        if data.HasField("session_end_info"):
            status = api_pb2.Status.Name(data.session_end_info.status)
        if data.HasField("experiment"):
            experiment = {
                "hparams": {
                    h.name: {
                        "type": api_pb2.DataType.Name(h.type),
                        "values": [getattr(v, v.WhichOneof("kind")) for v in h.domain_discrete.values],
                    }
                    for h in data.experiment.hparam_infos
                },
                "metrics": [m.name.tag for m in data.experiment.metric_infos],
            }
    print(json.dumps({"scalars": scalars, "hparams": hparams, "status": status, "experiment": experiment}))


main()
