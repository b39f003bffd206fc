"""The numbers and the configuration a script hands the client, read into what JSON can carry.

A figure is a Python number, a NumPy scalar or a one-element tensor or array; anything else is the
script's mistake and raises a `TypeError` that names the argument. A figure that is not finite is
sent as `null` (JSON has no NaN).
"""

import dataclasses
import numbers
from math import isfinite
from typing import Any, Dict, Mapping, Optional, Union

Number = Union[int, float]


def number(value: Any, name: str) -> Optional[Number]:
    """`value` as an int or a finite float, `None` for `None` or a value that is not finite.

    A CUDA tensor is read with one device synchronization (`tensor.item()`).
    """
    kind = type(value)
    if kind is float:
        return value if isfinite(value) else None
    if kind is int or value is None:
        return value
    return _convert(value, name)


def count(value: Any, name: str) -> Optional[Number]:
    """A figure that counts things (samples): an int when it is whole."""
    read = number(value, name)
    if type(read) is float and read.is_integer():
        return int(read)
    return read


def figures(values: Dict[str, Any], what: str) -> Dict[str, Any]:
    """Read every figure of `values` in place (the dict is the caller's own `**kwargs`)."""
    for key, value in values.items():
        if type(key) is not str:
            raise TypeError(f"{what} names must be str, got {type(key).__name__} {_short(key)}")
        if type(value) is not float or not isfinite(value):
            values[key] = number(value, key)
    return values


def _convert(value: Any, name: str) -> Optional[Number]:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError(f"{name} must be a number or a 0-d tensor, got bool {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        read = float(value)
        return read if isfinite(read) else None
    elements = _element_count(value)
    if elements == 1:
        try:
            read = value.item()  # cheaper than float(t.detach()), and no warning for a loss with grad
        except (AttributeError, TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"{name} must be a number or a 0-d tensor, got {_describe(value)} ({e})") from None
        if isinstance(read, bool) or not isinstance(read, (int, float)):
            raise TypeError(f"{name} must be a number or a 0-d tensor, got {_describe(value)} holding {read!r}")
        return read if type(read) is int or isfinite(read) else None
    if elements is not None:
        raise TypeError(
            f"{name} must be a number or a 0-d tensor, got {_describe(value)}: "
            f"reduce it to one number first (e.g. .mean() or .item())"
        )
    raise TypeError(f"{name} must be a number or a 0-d tensor, got {_describe(value)}")


def _element_count(value: Any) -> Optional[int]:
    """How many elements a tensor or an array holds; `None` for anything else."""
    numel = getattr(value, "numel", None)
    if callable(numel) and hasattr(value, "shape"):
        return int(numel())
    size = getattr(value, "size", None)
    if isinstance(size, int) and hasattr(value, "ndim"):
        return size
    return None


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and _element_count(value) is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"{type(value).__name__} {_short(value)}"


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_object(config: Any) -> Dict[str, Any]:
    """The script's configuration as a JSON object: a mapping, an argparse namespace or a dataclass."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        items = dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        items = dataclasses.asdict(config)
    elif hasattr(config, "__dict__") and not isinstance(config, type):
        items = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    else:
        raise TypeError(
            f"config must be a dict, an argparse.Namespace or a dataclass, got {type(config).__name__} {_short(config)}"
        )
    return _jsonable(items, 0)


def _jsonable(value: Any, depth: int) -> Any:
    """`value` with every part JSON can carry kept and the rest written as text."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        read = float(value)
        return read if isfinite(read) else None
    if depth >= 16:
        return _short(value, 200)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    if _element_count(value) == 1:
        return _jsonable(value.item(), depth + 1)
    return _short(value, 200)


def readable(values: Mapping[str, Any]) -> Dict[str, Any]:
    """The figures of a framework's metrics that read as numbers; the others are left out.

    A framework's dict may hold text or whole tensors next to its figures: those are not the
    script's mistake, so they are skipped rather than refused.
    """
    read: Dict[str, Any] = {}
    for key, value in values.items():
        try:
            read[str(key)] = number(value, str(key))
        except (TypeError, ValueError, RuntimeError):
            continue
    return read
