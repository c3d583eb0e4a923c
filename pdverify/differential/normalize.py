"""What a unit returned, as plain JSON that two releases' runs can be compared on exactly.

Tensors and arrays keep their dtype, device and shape beside their values (an int32 list and an int64 list with
the same values are different results); dataclasses become their fields; objects the suite only passes through
(a sampling-info sentinel, a batch stand-in) become their type's name; an exception becomes its type and the first
line of its message.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np
import torch

MESSAGE_CHARS = 200
"""How much of an exception's first line is kept (messages can hold object addresses past it)."""


def normalize(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, booleans, None)."""
    if isinstance(value, enum.Enum):  # before int: an IntEnum renumbered between releases is the same member
        return {"enum": type(value).__name__, "name": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        t = value.detach()
        return {"tensor": str(t.dtype).removeprefix("torch."), "device": t.device.type, "shape": list(t.shape),
                "values": t.cpu().tolist()}  # fmt: skip
    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}
    if isinstance(value, np.generic):
        return {"scalar": str(value.dtype), "value": value.item()}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": type(value).__name__,
                "fields": {f.name: normalize(getattr(value, f.name)) for f in dataclasses.fields(value)}}  # fmt: skip
    if isinstance(value, dict):
        return {"dict": {str(k): normalize(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted((normalize(v) for v in value), key=repr)}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    return {"object": type(value).__name__}


def raised(exc: BaseException) -> dict[str, Any]:
    """An exception a unit raised: its type and the head of its first line."""
    text = str(exc).strip().splitlines()
    return {"raises": type(exc).__name__, "message": (text[0] if text else "")[:MESSAGE_CHARS]}
