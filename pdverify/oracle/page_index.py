"""Oracles of the page-index helpers."""

from __future__ import annotations

from collections.abc import Sequence

from pdverify.validation import require_aligned, require_index_list, require_int, require_page_size


def strided_pages(kv_indices: Sequence[int], page_size: int) -> list[int]:
    """The page formula on any integer list: the value at every position ``p`` with ``p % page_size == 0``,
    divided by ``page_size`` rounding towards minus infinity."""
    values = require_index_list("kv_indices", kv_indices)
    ps = require_page_size(page_size)
    out: list[int] = []
    position_in_page = 0
    for v in values:
        if position_in_page == 0:
            out.append(v // ps)  # Python's int division floors, like the contract asks
        position_in_page = (position_in_page + 1) % ps
    return out


def distinct_pages(kv_indices: Sequence[int], page_size: int) -> list[int]:
    """The paged contract: the distinct pages holding the tokens, in order of first appearance.

    ``kv_indices`` must be a page-aligned run of a paged row: every page holds ``page_size`` consecutive
    locations in order, except that the last may be partial.
    """
    values = require_index_list("kv_indices", kv_indices)
    ps = require_page_size(page_size)
    # The run is page-aligned exactly when it equals the run its first-of-page values describe; that one
    # comparison decides the common case, and the walk below names the first bad position otherwise.
    pages = [v // ps for v in values[::ps]]
    if min(values, default=0) >= 0 and len(set(pages)) == len(pages):
        described = [p * ps + o for p in pages for o in range(ps)]
        if described[: len(values)] == values:
            return pages
    pages = []
    for i, v in enumerate(values):
        if v < 0:
            raise ValueError(f"kv_indices[{i}]={v} is not a token location (must be >= 0)")
        page, offset = divmod(v, ps)
        if offset != i % ps:
            raise ValueError(
                f"kv_indices[{i}]={v} sits at offset {offset} of page {page}, but a page-aligned paged "
                f"run (page_size={ps}) puts position {i} at offset {i % ps}"
            )
        if offset == 0:
            if page in pages:
                raise ValueError(f"kv_indices revisits page {page} at position {i}")
            pages.append(page)
        elif page != pages[-1]:
            raise ValueError(f"kv_indices[{i}]={v} leaves page {pages[-1]} in mid-page")
    return pages


def page_count(num_kv_indices: int, page_size: int) -> int:
    """Pages needed for ``num_kv_indices`` tokens: whole pages plus one for a remainder."""
    n = require_int("num_kv_indices", num_kv_indices, minimum=0)
    ps = require_page_size(page_size)
    whole, rest = divmod(n, ps)
    return whole + (1 if rest else 0)


def align_floor(length: int, page_size: int) -> int:
    """The largest page boundary not above ``length``."""
    n = require_int("length", length, minimum=0)
    ps = require_page_size(page_size)
    return n - n % ps


def suffix_pages(row: Sequence[int], prefix_len: int, seq_len: int, page_size: int) -> list[int]:
    """Pages of tokens ``[prefix_len, seq_len)`` of a paged row; the prefix must be page-aligned."""
    values = require_index_list("row", row)
    ps = require_page_size(page_size)
    p = require_aligned("prefix_len", require_int("prefix_len", prefix_len, minimum=0), ps)
    s = require_int("seq_len", seq_len, minimum=0)
    if p > s:
        raise ValueError(f"prefix_len={p} must be <= seq_len={s}")
    if s > len(values):
        raise ValueError(f"seq_len={s} exceeds the row's {len(values)} written slots")
    return distinct_pages([values[i] for i in range(p, s)], ps)
