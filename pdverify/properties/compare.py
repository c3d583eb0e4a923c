"""Exact comparisons for integer results: type, dtype, device, shape and values. No tolerances."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

NUMPY_OF: dict[torch.dtype, np.dtype[Any]] = {
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
}


def assert_host_indices(what: str, result: Any, expected: Sequence[int], dtype: np.dtype[Any]) -> None:
    """``result`` is a 1-D host ``np.ndarray`` of ``dtype`` equal to ``expected`` element by element."""
    assert isinstance(result, np.ndarray), f"{what}: expected a host numpy array, got {type(result).__name__}"
    assert result.dtype == dtype, f"{what}: dtype {result.dtype}, expected {dtype}"
    assert result.shape == (len(expected),), f"{what}: shape {result.shape}, expected ({len(expected)},)"
    got = result.tolist()
    assert got == list(expected), f"{what}: {got} != expected {list(expected)}"


def assert_tensor(what: str, result: Any, expected: Sequence[int], dtype: torch.dtype, device: str) -> None:
    """``result`` is a 1-D tensor of ``dtype`` on ``device`` equal to ``expected``."""
    assert isinstance(result, torch.Tensor), f"{what}: expected a tensor, got {type(result).__name__}"
    assert result.dtype == dtype, f"{what}: dtype {result.dtype}, expected {dtype}"
    assert result.device.type == torch.device(device).type, f"{what}: on {result.device}, expected {device}"
    assert tuple(result.shape) == (len(expected),), f"{what}: shape {tuple(result.shape)}, expected ({len(expected)},)"
    got = result.tolist()
    assert got == list(expected), f"{what}: {got} != expected {list(expected)}"


def assert_int(what: str, result: Any, expected: int) -> None:
    """An exact Python-int result (``bool`` and floats rejected)."""
    assert isinstance(result, (int, np.integer)) and not isinstance(result, bool), (
        f"{what}: expected an int, got {type(result).__name__} {result!r}"
    )
    assert result == expected, f"{what}: {result} != expected {expected}"
