"""Before #31173: ``kv_to_page_indices`` took a host numpy array; every caller first copied all ``n`` token
indices to the host with ``.cpu().numpy()``, and ``page_size == 1`` returned the input itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from pdverify.production.page_index import PageIndices


def kv_to_page_indices_host(kv_indices: npt.NDArray[np.integer[Any]], page_size: int) -> PageIndices:
    """The pre-#31173 helper (``disaggregation/utils.py``): host array in, host array out."""
    # The page is guaranteed to be full except the last page.
    if page_size == 1:
        return kv_indices
    return kv_indices[::page_size] // page_size


def kv_to_page_indices(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    """The legacy call site: copy every token index to the host, then stride there."""
    return kv_to_page_indices_host(kv_indices.cpu().numpy(), page_size)


def suffix_page_indices(
    req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int
) -> PageIndices:
    return kv_to_page_indices(req_to_token[req_pool_idx, prefix_len:seq_len], page_size)
