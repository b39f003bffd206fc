"""Opening a watched run: checking the arguments, reaching the backend and saying hello.

Shared by `dpt_tui.init`, the Animator and the framework callbacks, which differ in what they
know (the ranks, the device, how a save is made) and hand that in.
"""

import os
from typing import Any, Dict, List, Optional

from . import _lifecycle
from ._identity import Identity, host
from ._launch import connect_backend
from ._lr import LrScale
from ._session import SaveAction, Session
from ._values import config_object
from ._wire import Connection

PROTOCOL_VERSION = 1
DISABLED_ENV = "DPT_DISABLED"


def disabled() -> bool:
    """`DPT_DISABLED=1` (or any value but empty, 0, false, no): every client call does nothing."""
    return os.environ.get(DISABLED_ENV, "").strip().lower() not in ("", "0", "false", "no")


def open_session(
    *,
    framework: str,
    label: str,
    identity: Identity,
    config: Any = None,
    optimizer: Any = None,
    can_save: bool = False,
    save: Optional[SaveAction] = None,
    report_saves: bool = True,
    total_steps: Any = None,
) -> Session:
    """Open this process's run (raising when a script already has one open) and say hello."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    settings = config_object(config)
    if optimizer is not None and not hasattr(optimizer, "register_step_pre_hook"):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer (torch 2.0 or newer), got {type(optimizer).__name__}"
        )
    if total_steps is not None and (type(total_steps) is not int or total_steps < 0):
        raise TypeError(f"total_steps must be a non-negative int or None, got {total_steps!r}")
    if save is not None and not callable(save):
        raise TypeError(f"save must be a function taking no arguments, got {type(save).__name__}")

    _lifecycle.make_room(label, framework)
    lr = LrScale(optimizer) if optimizer is not None else None
    can: List[str] = ["pause", "stop"] + (["lr"] if lr is not None else []) + (["save"] if can_save else [])
    session = Session(
        Connection(connect_backend()), label=label, framework=framework, lr=lr, save=save, report_saves=report_saves
    )
    _lifecycle.claim(session)
    hello: Dict[str, Any] = {
        "type": "hello",
        "version": PROTOCOL_VERSION,
        "rank": identity.rank,
        "world_size": identity.world_size,
        "local_rank": identity.local_rank,
        "pid": os.getpid(),
        "host": host(),
        "label": label,
        "framework": framework,
        "config": settings,
        "devices": identity.devices,
        "can": can,
        "total_steps": total_steps,
    }
    session.start(hello)
    return session
