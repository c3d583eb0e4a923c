"""Strategies for one request's prefill transfer at scheduler level: ``prefill_cases``, and ``state_lists``
for the metadata wire."""

from __future__ import annotations

from hypothesis import strategies as st

from pdverify.model.exchange import STATE_TYPES, PrefillCase
from pdverify.model.layout import pages_needed, token_locations
from strategies._seeded import distinct_sample
from strategies._validate import check_int
from strategies.layouts import chunk_schedules, page_sizes

MODES = ("plain", "dcp", "staging")


def prefill_cases(
    *, max_length: int = 96, max_chunks: int = 6, max_page_size: int = 16
) -> st.SearchStrategy[PrefillCase]:
    """A request on the prefill side: a page size, a prompt of ``0..max_length`` tokens on fragmented distinct
    pages, a page-aligned decode prefix ``D`` anywhere in ``[0, L]`` (``D == L``: a full decode hit), a chunk
    schedule, one of plain sends / a DCP pack limit (a page multiple) / the staging grid (any
    ``chunked_prefill_size``, aligned or not), an early cached-prefix send or none (any prefix below ``L``:
    unaligned ones are skipped by the code), an int64 virtual-to-physical translation or none, any subset of
    the page-strided state types, a sliding window and its ring, the request's row and its aux index."""
    check_int("max_length", max_length)
    check_int("max_chunks", max_chunks, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    return _prefill_cases(max_length=max_length, max_chunks=max_chunks, max_page_size=max_page_size)


@st.composite
def _prefill_cases(draw: st.DrawFn, *, max_length: int, max_chunks: int, max_page_size: int) -> PrefillCase:
    ps = draw(page_sizes(max_size=max_page_size))
    n = draw(st.integers(0, max_length))
    d = draw(st.integers(0, n // ps)) * ps
    count = pages_needed(n, ps)
    row = tuple(token_locations(distinct_sample(draw, 1, count + 64, count), n, ps))
    ends = tuple(draw(chunk_schedules(n, max_chunks=max_chunks)))
    mode = draw(st.sampled_from(MODES))
    early = draw(st.none() | st.integers(0, n - 1)) if n else None
    window = draw(st.integers(1, 40))
    return PrefillCase(
        page_size=ps,
        length=n,
        decode_prefix=d,
        row=row,
        chunk_ends=ends,
        req_pool_idx=draw(st.integers(0, 3)),
        dcp_max_tokens=draw(st.integers(1, 4)) * ps if mode == "dcp" else None,
        chunked_prefill_size=draw(st.integers(1, 4 * ps)) if mode == "staging" else None,
        early_prefix=early,
        translate_offset=draw(st.none() | st.integers(1, 4096).map(lambda k: k * ps)),
        state_types=tuple(draw(st.lists(st.sampled_from(STATE_TYPES), unique=True, max_size=4))),
        window=window,
        ring_size=window + draw(st.integers(0, 8)),
        aux_index=draw(st.integers(0, 2**31 - 1)),
    )


def state_lists(*, max_lists: int = 4, max_size: int = 16) -> st.SearchStrategy[list[list[int]]]:
    """Decode's state lists as they go on the wire: up to ``max_lists`` lists of int32 page or slot ids
    (empty lists included)."""
    check_int("max_lists", max_lists)
    check_int("max_size", max_size)
    return st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=max_size), max_size=max_lists)
