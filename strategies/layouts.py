"""Strategies for paged KV layouts: page sizes, paged rows, aligned prefixes, chunk schedules, PD pairs.

Everything generated is in contract (rows laid out ``page * page_size + offset`` over distinct physical
pages >= 1, prefixes page-aligned, ``0 <= D <= L``); out-of-contract inputs are explicit error-input tests.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from pdverify.model.layout import PagedRow, pages_needed
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int, check_range

ODD_PAGE_SIZES = (3, 5, 7, 12, 33)


def page_sizes(*, max_size: int = 256, odd: bool = True) -> st.SearchStrategy[int]:
    """Page sizes: 1, the powers of two up to ``max_size`` and (with ``odd``) a few other sizes.

    Shrinks towards 1.
    """
    check_int("max_size", max_size, minimum=1)
    return st.sampled_from(page_size_list(max_size, odd=odd))


@functools.cache
def page_size_list(max_size: int, *, odd: bool = True) -> tuple[int, ...]:
    """What ``page_sizes`` draws from, ascending (cached: the scheduler-level strategies ask once an example)."""
    sizes = {1 << k for k in range(max_size.bit_length()) if 1 << k <= max_size}
    if odd:
        sizes |= {s for s in ODD_PAGE_SIZES if s <= max_size}
    return tuple(sorted(sizes))


INDEX_DTYPES = (torch.int32, torch.int64)


def index_dtypes() -> st.SearchStrategy[torch.dtype]:
    """The index dtypes of token locations: int32 (``req_to_token`` rows) and int64 (translated indices)."""
    return st.sampled_from(INDEX_DTYPES)


def paged_rows(
    page_size: int | st.SearchStrategy[int] | None = None,
    *,
    min_length: int = 0,
    max_length: int = 2048,
    prefix: bool = True,
    spare_pages: int = 64,
) -> st.SearchStrategy[PagedRow]:
    """A request's paged row: ``length`` tokens (``min_length..max_length``) on fragmented, unordered,
    distinct physical pages drawn from a pool of ``pages_needed + spare_pages`` pages (page 0 never used),
    and (with ``prefix``) a page-aligned decode prefix ``D <= length``; otherwise ``D == 0``. Within the bound
    release's input domain (``DOMAIN``): ``D == 0`` before decode prefixes."""
    check_int("min_length", min_length)
    check_int("max_length", max_length)
    check_range("min_length", min_length, "max_length", max_length)
    check_int("spare_pages", spare_pages)
    if page_size is not None and not isinstance(page_size, st.SearchStrategy):
        check_int("page_size", page_size, minimum=1)
    return _paged_rows(
        page_size=page_size,
        min_length=min_length,
        max_length=max_length,
        prefix=prefix,
        spare_pages=spare_pages,
    )


@st.composite
def _paged_rows(draw: st.DrawFn, /, page_size: int | st.SearchStrategy[int] | None = None, **kw: Any) -> PagedRow:
    return draw_paged_row(Choices(draw), page_size, **kw)


def draw_paged_row(
    c: Choices,
    page_size: int | st.SearchStrategy[int] | None = None,
    *,
    min_length: int = 0,
    max_length: int = 2048,
    prefix: bool = True,
    spare_pages: int = 64,
) -> PagedRow:
    """``paged_rows``' example, drawn from ``c`` (arguments already validated)."""
    if page_size is None:
        ps = pick_page_size(c, page_size_list(256))
    elif isinstance(page_size, st.SearchStrategy):
        ps = c.draw(page_size)
    else:
        ps = page_size
    length = c.integer(min_length, max_length)
    count = pages_needed(length, ps)
    pool = count + spare_pages
    pages = distinct_sample(c, 1, pool, count)
    d = c.integer(0, length // ps) * ps if prefix and DOMAIN.decode_prefix else 0  # decode prefixes: 0.5.11 on
    return PagedRow(tuple(pages), length, ps, d)


LEAN_PAGE_SIZE = 4
"""The page size a lean's simplest example takes: above 1 (page arithmetic shows) and small enough to read."""

LEAN_PAGES = 3
"""How many pages a lean's simplest prompt spans (at, one short of or one past the boundary: ``LEANS``)."""


def pick_page_size(c: Choices, sizes: tuple[int, ...]) -> int:
    """One of ``sizes`` (ascending); shrinks to the first, or under a lean to ``LEAN_PAGE_SIZE`` (or the largest
    below it)."""
    return c.pick(sizes, lean=max(0, sum(1 for s in sizes if s <= LEAN_PAGE_SIZE) - 1))


def boundary_length(c: Choices, lo: int, hi: int, ps: int) -> int:
    """A length in ``[lo, hi]``: half the time at a page boundary of ``ps`` - a multiple of it or one off either
    side (within range), where page arithmetic goes wrong - otherwise any (shrinks towards ``lo``; under a lean
    to ``LEAN_PAGES`` pages at, one short of or one past the boundary, by the lean)."""
    if hi >= lo and c.boolean(lean=True):
        k = c.integer(lo // ps, hi // ps, lean=LEAN_PAGES)
        return min(hi, max(lo, k * ps + (0, -1, 1)[c.integer(0, 2, lean=c.leaning - 1)]))
    return c.integer(lo, hi)


def boundary_prefix(c: Choices, n: int, ps: int) -> int:
    """A page-aligned prefix in ``[0, n]``: one time in four the largest (``D == L`` when ``n`` is aligned, else the
    last page partly past it), otherwise any (shrinks to 0; under lean 1 to the largest, ``D == L`` at its
    page-aligned length; under the other leans to one page)."""
    if n >= ps and c.integer(0, 3, lean=3 if c.leaning == 1 else None) == 3:
        return n // ps * ps
    return c.integer(0, n // ps, lean=1) * ps


def chunk_schedules(
    length: int,
    *,
    max_chunks: int = 8,
) -> st.SearchStrategy[list[int]]:
    """Where prefill's chunks end: an increasing list of 1..``max_chunks`` ends whose last element is ``length``
    (the last chunk) and whose other ends fall anywhere in ``1..length - 1``, mid-page included (a chunk computes a
    token at least; a chunk that reaches the end of the prompt *is* the last chunk)."""
    check_int("length", length)
    check_int("max_chunks", max_chunks, minimum=1)
    return _chunk_schedules(length=length, max_chunks=max_chunks)


@st.composite
def _chunk_schedules(draw: st.DrawFn, length: int, *, max_chunks: int = 8) -> list[int]:
    return draw_chunk_ends(Choices(draw), length, max_chunks=max_chunks)


def draw_chunk_ends(c: Choices, length: int, *, max_chunks: int = 8) -> list[int]:
    """``chunk_schedules``' example, drawn from ``c``: how many inner ends (shrinks to none: one chunk; under a
    lean to one inner end, one token past the first page of ``LEAN_PAGE_SIZE``), then each end; every chunk
    computes a token at least (ends strictly increase from 1)."""
    count = c.integer(0, max_chunks - 1 if length > 1 else 0, lean=1)
    inner = {c.integer(1, length - 1, lean=LEAN_PAGE_SIZE + 1) for _ in range(count)}
    return [*sorted(inner), length]


@dataclass(frozen=True)
class PDPair:
    """One request seen from both sides: same ``L``, ``D`` and page size, different physical pages."""

    prefill: PagedRow
    decode: PagedRow
    chunk_ends: list[int]
    dtype: torch.dtype = torch.int32
    """The index dtype of both request-to-token tables: int32 as allocated, int64 as translated to physical
    ids (unified memory)."""

    def input_features(self) -> tuple[str, ...]:
        """The input features the pair uses that came with a release (``pdverify.properties.releases.FEATURES``):
        a decode prefix, int64 (translated) tables."""
        used = ["decode_prefixes"] if self.prefix_len else []
        if self.dtype == torch.int64:
            used.append("translated_ids")
        return tuple(used)

    @property
    def page_size(self) -> int:
        return self.prefill.page_size

    @property
    def length(self) -> int:
        return self.prefill.length

    @property
    def prefix_len(self) -> int:
        return self.decode.prefix_len


def pd_pairs(
    page_size: int | st.SearchStrategy[int] | None = None,
    *,
    max_length: int = 1024,
    max_chunks: int = 8,
) -> st.SearchStrategy[PDPair]:
    """A request's prefill row and decode row (independently fragmented), its decode prefix, a chunk schedule
    for prefill and the index dtype of the tables (int32, or int64 where the bound release has translated ids)."""
    check_int("max_length", max_length)
    check_int("max_chunks", max_chunks, minimum=1)
    if page_size is not None and not isinstance(page_size, st.SearchStrategy):
        check_int("page_size", page_size, minimum=1)
    return _pd_pairs(page_size=page_size, max_length=max_length, max_chunks=max_chunks)


@st.composite
def _pd_pairs(
    draw: st.DrawFn,
    page_size: int | st.SearchStrategy[int] | None = None,
    *,
    max_length: int = 1024,
    max_chunks: int = 8,
) -> PDPair:
    c = Choices(draw)
    # a prompt has a token at least: SGLang refuses an empty one ("input_ids cannot be empty.", io_struct.py)
    decode = draw_paged_row(c, page_size, min_length=1, max_length=max(1, max_length))
    ps, n = decode.page_size, decode.length
    count = pages_needed(n, ps)
    pages = distinct_sample(c, 1, count + 64, count)
    prefill = PagedRow(tuple(pages), n, ps, decode.prefix_len)
    # int64 tables are translated ids (unified-memory pools, #33362); before them req_to_token's int32 is all there is
    dtype = c.pick(INDEX_DTYPES) if DOMAIN.has("translated_ids") else torch.int32
    return PDPair(prefill, decode, draw_chunk_ends(c, n, max_chunks=max_chunks), dtype)


def token_index_lists(*, max_size: int = 512, max_value: int = 2**31 - 1) -> st.SearchStrategy[list[int]]:
    """Any non-negative integer token indices (the page formula holds on every integer input)."""
    check_int("max_size", max_size)
    check_int("max_value", max_value)
    return st.lists(st.integers(0, max_value), max_size=max_size)
