"""Devices the suite runs on. Nothing here touches CUDA at import time."""

from __future__ import annotations

import torch

DEVICES: tuple[str, ...] = ("cpu", "cuda")


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def check_device(device: str) -> str:
    """``ValueError`` for an unknown device name or a CUDA device asked for where none is present."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not cuda_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False on this machine")
    return device
