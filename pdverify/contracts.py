"""Runtime contract checks for the PD page paths, for a serving engineer's debug build.

Each validator raises ``ValueError`` naming the request and the contract; none of them copies more than the
page list it is given. Wrap the released functions with them, for instance::

    from sglang.srt.mem_cache import common
    from pdverify import contracts

    common.suffix_page_indices = contracts.guarded_suffix_page_indices(common.suffix_page_indices)

    # decode side, before send_metadata:
    contracts.check_decode_prefix(total_prefix_len, page_size, request=req.rid)
    contracts.check_destination_pages(page_indices, request=req.rid)
    # prefill side, at bootstrap:
    contracts.check_page_counts(num_pages_to_send, len(decode_page_indices), request=req.rid)

These catch the three silent hazards of the released code (docs/concepts.md, "Silent hazards"): a misaligned decode
prefix (pages dropped, decode's cached prefix overwritten), a sequence past the written slots (page 0, the
padding page, in the list) and an int64 page list read as int32 on the wire.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from pdverify.model.layout import PADDING_PAGE


def _who(request: object) -> str:
    return f"request {request!r}" if request is not None else "request"


def check_decode_prefix(decode_prefix_len: int, page_size: int, *, request: object = None) -> None:
    """Decode's cached prefix ``D`` must be page-aligned (else prefill and decode lists stop pairing)."""
    if page_size <= 0:
        raise ValueError(f"{_who(request)}: page_size must be >= 1, got {page_size}")
    if decode_prefix_len < 0 or decode_prefix_len % page_size:
        raise ValueError(
            f"{_who(request)}: decode prefix {decode_prefix_len} is not page-aligned (page_size {page_size}); "
            "contract: D % page_size == 0, or prefill and decode page lists stop pairing"
        )


def check_destination_pages(pages: Any, *, request: object = None) -> None:
    """A destination list holds real pages (never page 0, the padding page) and is int32 for the wire."""
    check_wire_dtype(pages, request=request)
    arr = np.asarray(pages)
    if arr.size and (arr == PADDING_PAGE).any():
        at = int(np.flatnonzero(arr == PADDING_PAGE)[0])
        raise ValueError(
            f"{_who(request)}: destination page list holds page 0 (the padding page) at position {at}; "
            "contract: no page 0 in a destination list (a sequence past the written slots?)"
        )


def check_wire_dtype(pages: Any, *, request: object = None) -> None:
    """The wire carries int32 (``np.frombuffer(..., np.int32)``): an int64 list is silently misparsed."""
    dtype = pages.dtype if hasattr(pages, "dtype") else np.asarray(pages).dtype
    if dtype not in (np.int32, torch.int32):
        raise ValueError(
            f"{_who(request)}: page list has dtype {dtype}; contract: int32 on the wire "
            "(an int64 list is read as twice as many int32 pages, every other one 0)"
        )


def check_page_counts(sender_pages: int, receiver_pages: int, *, request: object = None) -> None:
    """Prefill's sender count equals decode's destination count."""
    if sender_pages != receiver_pages:
        raise ValueError(
            f"{_who(request)}: prefill will send {sender_pages} pages but decode registered {receiver_pages}; "
            "contract: sender and receiver page counts are equal"
        )


def check_out_cache_loc(
    out_cache_loc: torch.Tensor, pool_tokens: int, page_size: int, *, request: object = None
) -> None:
    """Every ``out_cache_loc`` slot lies in the pool and outside page 0."""
    if out_cache_loc.numel() == 0:
        return
    lo, hi = int(out_cache_loc.min()), int(out_cache_loc.max())
    if lo < page_size or hi >= pool_tokens:
        raise ValueError(
            f"{_who(request)}: out_cache_loc spans [{lo}, {hi}]; contract: slots within the pool "
            f"[{page_size}, {pool_tokens}) (page 0 is padding)"
        )


def guarded_suffix_page_indices(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``suffix_page_indices`` that checks its prefix alignment and that no padding page comes back."""

    @functools.wraps(fn)
    def guarded(req_to_token: Any, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int) -> Any:
        check_decode_prefix(prefix_len, page_size, request=req_pool_idx)
        if prefix_len > seq_len:
            raise ValueError(f"request {req_pool_idx!r}: prefix_len {prefix_len} > seq_len {seq_len}")
        pages = fn(req_to_token, req_pool_idx, prefix_len, seq_len, page_size)
        arr = np.asarray(pages)
        if arr.size and (arr == PADDING_PAGE).any():
            raise ValueError(
                f"request {req_pool_idx!r}: pages of [{prefix_len}, {seq_len}) include page 0; contract: "
                "seq_len within the written slots"
            )
        return pages

    return guarded
