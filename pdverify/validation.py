"""Argument checks shared by pdverify's own entry points (oracles, model, contracts).

The production ports never call these: they behave exactly as the released code does, silent hazards
included. Every check raises ``ValueError`` naming the argument and the contract it broke.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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


def require_index_list(name: str, value: Any) -> list[int]:
    """A sequence of non-bool Python integers."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a sequence of integers, got {type(value).__name__}")
    out = list(value)
    if set(map(type, out)) <= {int}:  # the common case, without a Python-level check per element
        return out
    for i, v in enumerate(out):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name}[{i}] must be an integer, got {type(v).__name__} {v!r}")
    return [int(v) for v in out]
