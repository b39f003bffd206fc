"""Who this process is in the run: its rank, the world's size and its device.

Ranks come from torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`) unless a framework
knows them better. The device is read from torch only when the script already imported it: this
client never imports torch itself, and never initializes CUDA on a device the script did not pick.
"""

import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Identity:
    """This rank's place in the run and the devices it trains on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    devices: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_env(cls) -> "Identity":
        return cls(
            rank=_env_int("RANK", 0),
            world_size=_env_int("WORLD_SIZE", 1),
            local_rank=_env_int("LOCAL_RANK", 0),
            devices=[current_device()],
        )


def host() -> str:
    return socket.gethostname()


def script_label() -> str:
    """The script's file name (`train.py`), the module run with `-m`, or `python` interactively."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        name = spec.name
        return name[: -len(".__main__")] if name.endswith(".__main__") else name
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    name = os.path.basename(path)
    return name if name and not name.startswith("-") else "python"


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def current_device() -> Dict[str, Any]:
    """The device torch trains on in this process: the current CUDA device, MPS, else the CPU."""
    torch = sys.modules.get("torch")
    if torch is None:
        return cpu()
    try:
        if torch.cuda.is_available():
            return cuda(torch, torch.cuda.current_device())
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return {"kind": "mps", "index": 0, "name": "Apple MPS", "uuid": None}
    except Exception:  # a broken driver means fewer details, never a failed init
        pass
    return cpu()


def device(dev: Any) -> Dict[str, Any]:
    """A `torch.device` (or its text) as the hello message describes it."""
    torch = sys.modules.get("torch")
    if torch is None or dev is None:
        return cpu()
    try:
        dev = torch.device(dev)
        if dev.type == "cuda":
            return cuda(torch, torch.cuda.current_device() if dev.index is None else dev.index)
        if dev.type == "cpu":
            return cpu()
        return {"kind": dev.type, "index": dev.index, "name": None, "uuid": None}
    except Exception:
        return cpu()


def cpu() -> Dict[str, Any]:
    return {"kind": "cpu", "index": None, "name": None, "uuid": None}


def cuda(torch: Any, index: int) -> Dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    return {"kind": "cuda", "index": index, "name": props.name, "uuid": nvml_uuid(getattr(props, "uuid", None))}


def nvml_uuid(raw: Any) -> Optional[str]:
    """A GPU's UUID as NVML writes it, `GPU-` and 8-4-4-4-12 hex digits; `None` if unreadable."""
    if raw is None:
        return None
    data = getattr(raw, "bytes", None)
    if data is not None and len(data) == 16:
        digits = bytes(data).hex()
    else:
        text = str(raw).strip().lower()
        if text.startswith("gpu-"):
            text = text[4:]
        digits = text.replace("-", "")
    if len(digits) != 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    d = digits
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:]}"
