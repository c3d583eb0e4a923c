"""Devices the suite runs on. Nothing here touches CUDA at import time."""

from __future__ import annotations

import torch

DEVICES: tuple[str, ...] = ("cpu", "cuda")


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())
