"""Argument checks shared by pdverify's own entry points (oracles, model, contracts).

The production ports never call these: they behave exactly as the released code does, silent hazards
included. Every check raises ``ValueError`` naming the argument and the contract it broke.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def require_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is a (non-bool) integer at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def require_page_size(value: Any, name: str = "page_size") -> int:
    """A page size is a positive integer (the released helpers accept 0, negatives and bools silently)."""
    return require_int(name, value, minimum=1)


def require_aligned(name: str, value: int, page_size: int) -> int:
    """``value`` must be a multiple of ``page_size`` (a page boundary)."""
    if value % page_size:
        raise ValueError(f"{name} must be page-aligned (a multiple of page_size={page_size}), got {value}")
    return value


def require_index_tensor(name: str, value: Any) -> torch.Tensor:
    """A 1-D integer tensor of token indices."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of token indices, got {type(value).__name__}")
    if value.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of token indices, got shape {tuple(value.shape)}")
    if value.dtype not in _INT_DTYPES:
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    return value


def require_index_list(name: str, value: Any) -> list[int]:
    """A sequence of non-bool Python integers."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a sequence of integers, got {type(value).__name__}")
    out = list(value)
    for i, v in enumerate(out):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name}[{i}] must be an integer, got {type(v).__name__} {v!r}")
    return [int(v) for v in out]
