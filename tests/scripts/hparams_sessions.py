"""Lists a sweep's trials as TensorBoard's HParams plugin does (its own backend, reading the
sweep folder's event files), as JSON: per session group its name, the experiment's
hyperparameters, its metrics' last values and its sessions' statuses.
`python hparams_sessions.py SWEEP`.
"""
import json
import sys

from tensorboard import context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups


def main():
    logdir = sys.argv[1]
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    ctx = backend_context.Context(base_plugin.TBContext(logdir=logdir, multiplexer=mux, data_provider=provider))
    request_context = context.RequestContext()
    experiment = ctx.experiment_from_metadata(
        request_context, "", True, ctx.hparams_metadata(request_context, ""), None
    )
    names = [h.name for h in experiment.hparam_infos]
    request = api_pb2.ListSessionGroupsRequest(
        experiment_name="", allowed_statuses=[0, 1, 2, 3], start_index=0, slice_size=1000
    )
    groups = list_session_groups.Handler(request_context, ctx, "", request).run().session_groups
    out = [
        {
            "name": g.name,
            "hparams": {k: g.hparams[k].number_value for k in names if k in g.hparams},
            "metrics": {m.name.tag: m.value for m in g.metric_values},
            "statuses": [api_pb2.Status.Name(s.status) for s in g.sessions],
        }
        for g in groups
    ]
    print(json.dumps({"hparams": names, "groups": out}))


main()
