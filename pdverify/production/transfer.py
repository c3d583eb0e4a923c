"""Ports of the PD main-KV page selection on both sides (sglang 0.5.23).

Prefill: ``finalize_bootstrap`` (upstream) sizes the sender with ``kv_to_page_num(L - D)`` and starts sending at the
decode prefix ``D``; ``_send_kv_chunk`` sends ``[start_send_idx, end)``, where a non-last chunk ends on an
absolute page boundary (its partial page is deferred), ``end < start`` is skipped, and a zero-page chunk is
sent only when it is the last (``should_send_kv_chunk(n, last) = n > 0 or last`` of the common sender). The
common sender places each chunk at ``dst[curr_idx : curr_idx + len(chunk)]`` and flags the chunk that brings
``curr_idx`` to ``num_pages`` as the last.

Decode: the destination page list of ``[D, L)`` is ``kv_to_page_indices(row[D:L]).astype(np.int32)``: int32
because the wire (``tobytes`` / ``np.frombuffer(..., np.int32)``) carries int32.

Not modelled: the staging grid and DCP segment split (``compute_grid_segments``), checksums, state payloads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from pdverify.production.page_index import PageIndices, kv_to_page_indices

PageFn = Callable[[torch.Tensor, int], PageIndices]
WireIndices = npt.NDArray[np.int32]


@dataclass(frozen=True)
class PrefillSendState:
    """What the prefill side keeps per request between chunk sends."""

    req_pool_idx: int
    origin_len: int
    """``L``: ``len(req.origin_input_ids)``."""
    decode_prefix_len: int
    """``D``: the prefix decode already holds (``req.disagg_decode_prefix_len``)."""
    num_pages: int
    """The page count the sender was initialised with."""
    start_send_idx: int
    curr_idx: int = 0
    """The sender's cumulative page counter: where the next chunk lands in the destination list."""


@dataclass(frozen=True)
class KvChunk:
    """One send: ``pages`` go to ``dst[dst_offset : dst_offset + len(pages)]``."""

    pages: PageIndices
    dst_offset: int
    start: int
    end: int
    is_last: bool
    """The sender's view: this chunk brings its page counter to ``num_pages``."""


def select_chunk(
    req_to_token: torch.Tensor,
    state: PrefillSendState,
    *,
    extend_end: int,
    last_chunk: bool,
    page_size: int,
    pages_of: PageFn,
) -> tuple[KvChunk | None, PrefillSendState]:
    """The chunk loop of ``_send_kv_chunk`` with the page helper as a parameter (one call site, two eras)."""
    start = state.start_send_idx
    end = min(extend_end, state.origin_len)
    if not last_chunk:
        end -= end % page_size
    if end < start:
        return None, state
    pages = pages_of(req_to_token[state.req_pool_idx, start:end], page_size)
    sent = replace(state, start_send_idx=end)
    if len(pages) == 0 and not last_chunk:
        return None, sent
    curr = state.curr_idx + len(pages)
    chunk = KvChunk(pages, state.curr_idx, start, end, curr == state.num_pages)
    return chunk, replace(sent, curr_idx=curr)


def send_kv_chunk(
    req_to_token: torch.Tensor,
    state: PrefillSendState,
    *,
    extend_end: int,
    last_chunk: bool,
    page_size: int,
) -> tuple[KvChunk | None, PrefillSendState]:
    """Prefill: pages of the next chunk, passing the device slice to ``kv_to_page_indices`` (#31173)."""
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
    """Decode: destination pages of ``[D, L)``, int32 for the wire (``send_metadata``)."""
    kv_indices = req_to_token[req_pool_idx][decode_prefix_len:origin_input_len]
    return kv_to_page_indices(kv_indices, page_size).astype(np.int32)


def to_wire(page_indices: npt.NDArray[Any]) -> bytes:
    """Mooncake sends the raw bytes of the list."""
    return page_indices.tobytes()


def from_wire(payload: bytes) -> WireIndices:
    """The receiver parses int32, whatever was sent."""
    return np.frombuffer(payload, dtype=np.int32)
