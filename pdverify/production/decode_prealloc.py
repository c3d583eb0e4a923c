"""Decode pre-allocation for one request (``DecodePreallocQueue.pop_preallocated`` / ``_pre_alloc``), as
pdverify models its contract.

Follows sglang 0.5.23 - the L1 prefix written to ``[0, L1)``, fresh pages for ``[D, fill_len)`` taken in the
allocator's free order and written from ``D``, the main destination list ``kv_to_page_indices(row[D:L])`` cast to
int32, the state payloads (SWA window from ``max(D, L - W)``, DSA and MiniMax index-K from ``D``, the full lists
from 0, ring and request row) - with one difference: the slots ``[L1, D)`` that a HiCache restore fills later
get their destination pages reserved here, before the lists are built. 0.5.23 leaves those slots as the row
held them (0 on a fresh row, an earlier request's ids on a reused one), and its full-from-0 lists then name page
0 or a stale page for them (finding F1, ``findings/sglang-0.5.23.json``).
"""

from __future__ import annotations

import numpy as np
import torch

from pdverify.model.exchange import DecodeCase, DecodeTrace
from pdverify.model.layout import token_locations
from pdverify.production.page_index import (
    PageIndices,
    kv_to_page_indices,
    minimax_index_transfer_pages,
    suffix_page_indices,
)

REQ_POOL_IDX = 1
"""The row a fresh ``DecodeReqToTokenPool`` hands out first (row 0 is padding)."""


def request_state_transfer_indices(req_pool_idx: int, seq_len: int, layout: tuple[int, bool, int]) -> np.ndarray:
    """DeepSeek-V4's request-state transfer indices (``CompressStatePool.transfer_indices``): the one pending
    partial block of ``ratio`` tokens, as the request's pair ring (ratio 2), its online row, or the ring page that
    holds it; nothing at a block boundary."""
    ratio, online, ring_size = layout
    if seq_len == 0 or seq_len % ratio == 0:
        return np.empty((0,), dtype=np.int32)
    if ratio == 2 or online:
        return np.array([req_pool_idx], dtype=np.int32)
    pages_per_req = ring_size // ratio
    return np.array([req_pool_idx * pages_per_req + ((seq_len - 1) % ring_size) // ratio], dtype=np.int32)


def _take(free: list[int], tokens: int, page_size: int) -> list[int]:
    count = -(-tokens // page_size)
    if count > len(free):
        raise ValueError(f"{count} pages needed, {len(free)} free")
    pages, free[:] = free[:count], free[count:]
    return pages


def swa_tail_start(case: DecodeCase) -> int:
    """Where the request's SWA pages start with SWA tail pre-allocation (``_swa_tail_len``): the page-aligned
    window start before ``fill_len``."""
    return case.fill_len - case.swa_tail_len


def swa_mapping(case: DecodeCase, table: torch.Tensor, free: list[int]) -> dict[int, int]:
    """Full token location -> SWA token location for the tail ``[swa_tail_start, fill_len)``."""
    if case.swa_free_pages is None:
        return {}
    ps, fill, start = case.page_size, case.fill_len, swa_tail_start(case)
    swa = token_locations(_take(free, fill - start, ps), fill - start, ps)
    full = [int(v) for v in table[REQ_POOL_IDX, start:fill].tolist()]
    return dict(zip(full, swa, strict=True))


def state_lists(case: DecodeCase, table: torch.Tensor, swa: dict[int, int] | None = None) -> list[PageIndices]:
    ps, d, n, row = case.page_size, case.decode_prefix, case.length, table[REQ_POOL_IDX]
    out: list[PageIndices] = []
    for kind in case.state_types:
        if kind in ("SWA", "BLOCK_SCALE_SWA"):
            start = max(d, n - case.window) // ps * ps
            window = row[start:n]
            if swa:  # the SWA buffer's ids (0: a position the request holds no SWA page for)
                window = torch.tensor([swa.get(int(v), 0) for v in window.tolist()], dtype=torch.int64)
            out.append(kv_to_page_indices(window, ps))
        elif kind in ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"):
            out.append(kv_to_page_indices(row[:n], ps))
        elif kind == "MINIMAX_INDEX_K":
            out.append(minimax_index_transfer_pages(row[:n], page_size=ps, prefix_len=d))
        elif kind == "DSA":
            out.append(suffix_page_indices(table, REQ_POOL_IDX, d, n, ps))
        elif kind == "DSV4_REQUEST_STATE":
            out.append(request_state_transfer_indices(REQ_POOL_IDX, n, case.request_state))
        elif kind == "SWA_RING":
            positions = np.arange(max(0, n - case.window), n, dtype=np.int64)
            out.append((REQ_POOL_IDX * case.ring_size + positions % case.ring_size).astype(np.int32))
        else:  # REQUEST_ROW
            out.append(np.array([REQ_POOL_IDX], dtype=np.int32))
    return out


def evict(case: DecodeCase, free: list[int]) -> list[int]:
    """``_pre_alloc``'s eviction with the radix cache on: the pages for ``[L1, fill_len)`` the free list lacks, freed
    by evicting the cache's least recently used leaves, each whole, until they cover the shortfall; the allocator
    takes freed pages first (ascending), then its free list."""
    ps = case.page_size
    short = -(-case.fill_len // ps) - case.l1_prefix // ps - len(free)
    if case.decode_prefix == 0 or short <= 0:
        return []
    evicted: list[int] = []
    for leaf in case.cached_leaves:
        if len(evicted) >= short:
            break
        evicted += leaf
    free[:0] = sorted(evicted)
    return evicted


def reserve_restore(case: DecodeCase, table: torch.Tensor, free: list[int]) -> list[int]:
    """Destination slots for the pending restore of ``[L1, D)``, written to the row."""
    ps, l1, d = case.page_size, case.l1_prefix, case.decode_prefix
    locations = token_locations(_take(free, d - l1, ps), d - l1, ps)
    if locations:
        table[REQ_POOL_IDX, l1:d] = torch.tensor(locations, dtype=torch.int32, device=table.device)
    return locations


def decode_prealloc(case: DecodeCase, device: str) -> DecodeTrace:
    ps, d, n, fill = case.page_size, case.decode_prefix, case.length, case.fill_len
    stale = torch.tensor(case.stale_row, dtype=torch.int32, device=device)
    table = torch.stack([stale, stale.clone()])
    if case.l1_prefix:
        table[REQ_POOL_IDX, : case.l1_prefix] = torch.tensor(case.l1_row, dtype=torch.int32, device=device)
    free = list(case.free_pages)
    evicted = evict(case, free)
    allocated = token_locations(_take(free, fill - d, ps), fill - d, ps)
    if allocated:
        table[REQ_POOL_IDX, d:fill] = torch.tensor(allocated, dtype=torch.int32, device=device)
    restore = reserve_restore(case, table, free)
    swa = swa_mapping(case, table, list(case.swa_free_pages or ()))
    pages = kv_to_page_indices(table[REQ_POOL_IDX, d:n], ps).astype(np.int32)
    return DecodeTrace(
        pages=tuple(int(p) for p in pages),
        dtype=str(pages.dtype),
        decode_prefix_len=d,
        aux_index=case.aux_index,
        state=tuple(tuple(int(v) for v in s) for s in state_lists(case, table, swa)),
        allocated=tuple(allocated),
        swa_allocated=tuple(swa[int(v)] for v in table[REQ_POOL_IDX, swa_tail_start(case) : fill]) if swa else (),
        swa_start=swa_tail_start(case) if swa else 0,
        req_pool_idx=REQ_POOL_IDX,
        evicted=tuple(evicted),
        cleared_rows=(REQ_POOL_IDX,) if "DSV4_REQUEST_STATE" in case.state_types else (),
        row=tuple(int(v) for v in table[REQ_POOL_IDX, :n].tolist()),
        restore=tuple(restore),
        cache_protected_len=d,
    )
