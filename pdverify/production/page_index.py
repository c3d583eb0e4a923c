"""Ports of the released page-index helpers (``sglang/srt/mem_cache/common.py`` and ``disaggregation/minimax.py``,
sglang 0.5.23, after #31173 "Stride KV token->page indices on device before D2H copy").

Faithful to the released code, including its silence on bad input: these ports do no validation (only
``minimax_index_transfer_pages`` checks its arguments, as upstream does). What the released code does with
out-of-contract input is pinned in ``tests/test_error_inputs.py``; use ``pdverify.contracts`` for checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

PageIndices = npt.NDArray[np.integer[Any]]


def kv_to_page_indices(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    """Page index of every page of ``kv_indices`` (token locations laid out ``page * page_size + offset``).

    Strides and divides on ``kv_indices``' own device, then copies only the ``ceil(n / page_size)`` page
    indices to the host. The result is a fresh host array with ``kv_indices``' dtype.
    """
    return (kv_indices[::page_size] // page_size).cpu().numpy()


def suffix_page_indices(
    req_to_token: torch.Tensor,
    req_pool_idx: int,
    prefix_len: int,
    seq_len: int,
    page_size: int,
) -> PageIndices:
    """Pages of a request's tokens ``[prefix_len, seq_len)``; both PD sides call it with the same aligned prefix."""
    return kv_to_page_indices(req_to_token[req_pool_idx, prefix_len:seq_len], page_size)


def kv_to_page_num(num_kv_indices: int, page_size: int) -> int:
    """Pages that hold ``num_kv_indices`` tokens."""
    return (num_kv_indices + page_size - 1) // page_size


def page_align_floor(length: int, page_size: int) -> int:
    """``length`` rounded down to a page boundary."""
    return (length // page_size) * page_size


def minimax_index_transfer_pages(token_indices: torch.Tensor, *, page_size: int, prefix_len: int) -> PageIndices:
    """Transfer only the suffix; cached or restoring prefix slots must stay untouched."""
    if page_size <= 0 or not 0 <= prefix_len <= len(token_indices) or prefix_len % page_size:
        raise ValueError("MiniMax transfer prefix must be in range and page-aligned")
    return kv_to_page_indices(token_indices[prefix_len:], page_size)
