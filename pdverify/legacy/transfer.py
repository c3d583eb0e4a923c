"""The PD page selection before #31173: both call sites copied the token slice to the host first."""

from __future__ import annotations

import numpy as np
import torch

from pdverify.legacy.page_index import kv_to_page_indices
from pdverify.production.transfer import KvChunk, PrefillSendState, WireIndices, select_chunk


def send_kv_chunk(
    req_to_token: torch.Tensor,
    state: PrefillSendState,
    *,
    extend_end: int,
    last_chunk: bool,
    page_size: int,
) -> tuple[KvChunk | None, PrefillSendState]:
    """Prefill: ``kv_to_page_indices(req_to_token[pool, s:e].cpu().numpy(), ps)``."""
    return select_chunk(
        req_to_token,
        state,
        extend_end=extend_end,
        last_chunk=last_chunk,
        page_size=page_size,
        pages_of=kv_to_page_indices,
    )


def decode_page_indices(
    req_to_token: torch.Tensor,
    req_pool_idx: int,
    decode_prefix_len: int,
    origin_input_len: int,
    page_size: int,
) -> WireIndices:
    """Decode: the whole ``[D, L)`` token slice to the host, then stride, then int32."""
    kv_indices = req_to_token[req_pool_idx][decode_prefix_len:origin_input_len]
    return kv_to_page_indices(kv_indices, page_size).astype(np.int32)
