"""What a prefill transfer must ship, written from the contract in plain Python.

Independent of the production code: lists and integer arithmetic only. A page list is the distinct pages of a
token range in first-appearance order (a request's row is paged: ``location // page_size`` is its page).
"""

from __future__ import annotations

from pdverify.model.exchange import PrefillCase
from pdverify.oracle.page_index import distinct_pages as _pages


def page_count(case: PrefillCase) -> int:
    """P9: the sender's page count, ``ceil((L - D) / page_size)``."""
    q, r = divmod(case.length - case.decode_prefix, case.page_size)
    return q + (1 if r else 0)


def main_pages(case: PrefillCase) -> list[int]:
    """P10: the pages of ``[D, L)`` after the virtual-to-physical translation (a page table: a token keeps its
    offset in the page, its page is looked up)."""
    ps, v2p = case.page_size, case.translation
    row = case.row[case.decode_prefix :]
    if v2p is not None:
        row = tuple(v2p[loc // ps] * ps + loc % ps for loc in row)
    return _pages(row, ps)


def window_start(case: PrefillCase) -> int:
    """P15: ``floor(max(D, L - W) / page_size) * page_size`` - never before ``D``."""
    start = max(case.decode_prefix, case.length - case.window)
    return start - start % case.page_size


def swa_locations(case: PrefillCase) -> list[int]:
    """The row in the SWA pool: position ``i`` keeps its offset in the page and takes the SWA page of its logical
    page ``i // page_size`` (``swa_pages``); without an SWA map, the full pool's locations."""
    if case.swa_pages is None:
        return list(case.row)
    ps = case.page_size
    return [case.swa_pages[i // ps] * ps + i % ps for i in range(case.length)]


def state_lists(case: PrefillCase) -> list[list[int]]:
    """P15-P17 on the prefill side: one list per state type, in the pool's order."""
    row, ps, d, n = list(case.row), case.page_size, case.decode_prefix, case.length
    out: list[list[int]] = []
    for kind in case.state_types:
        if kind in ("SWA", "BLOCK_SCALE_SWA"):
            out.append(_pages(swa_locations(case)[window_start(case) : n], ps))
        elif kind in ("DSA", "MINIMAX_INDEX_K"):
            out.append(_pages(row[d:n], ps))
        elif kind in ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"):
            out.append(_pages(row[:n], ps))
        elif kind == "SWA_RING":
            out.append(
                [case.req_pool_idx * case.ring_size + p % case.ring_size for p in range(max(0, n - case.window), n)]
            )
        elif kind == "REQUEST_ROW":
            out.append([case.req_pool_idx])
        else:
            raise ValueError(f"state type {kind!r}: no contract written for it")
    return out


def early_send_waits(case: PrefillCase) -> bool:
    """S15: whether the first transfer must wait on the prior step's forward. Under the overlap scheduler an early
    send of a device prefix beyond ``D`` (page-aligned; it comes before any chunk) records the forward's completion
    event, and the first transfer that follows carries it - the early send's own, or the next one if the early
    send shipped nothing. No other transfer waits."""
    early = case.early_prefix
    return case.overlap and early is not None and early > case.decode_prefix and early % case.page_size == 0


def grid_boundaries(case: PrefillCase) -> set[int]:
    """Token positions where a send may end before ``L`` (P12): page boundaries; with staging, only the grid
    ``D + k * grid``."""
    grid = case.grid
    if grid is not None:
        return {case.decode_prefix + k * grid for k in range(case.length // grid + 2)}
    return set(range(0, case.length + 1, case.page_size))


def pack_limit(case: PrefillCase) -> int | None:
    """S12, S24: the most tokens one send may carry - the DCP pack buffer's size, the prefill buffer ceiling
    rounded up to a whole page - where the room's own decode peer needs the DCP relayout; None where it does not
    (no pack buffer, or the room's peer has prefill's DCP size)."""
    if case.dcp_max_tokens is None or not case.dcp_relayout:
        return None
    pages = -(-case.dcp_max_tokens // case.page_size)
    return pages * case.page_size


def split_at_limit(sends: list[int], decode_prefix: int, limit: int) -> list[int]:
    """S24: the token counts of ``sends`` (consecutive, from ``D``) once each is cut at every ``D + k * limit`` it
    crosses; a send of no tokens stays one send."""
    out: list[int] = []
    start = decode_prefix
    for n in sends:
        end = start + n
        if n == 0:
            out.append(0)
        cut = start
        while cut < end:
            boundary = decode_prefix + ((cut - decode_prefix) // limit + 1) * limit
            nxt = min(end, boundary)
            out.append(nxt - cut)
            cut = nxt
        start = end
    return out
