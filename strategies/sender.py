"""Strategies for the KV sender and bootstrap units: ``sender_cases`` and ``bootstrap_cases``."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import strategies as st

from pdverify.model.sender import BootstrapCase, SenderCase
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.layouts import page_size_list


def sender_cases(*, max_pages: int = 24, max_sends: int = 6) -> st.SearchStrategy[SenderCase]:
    """One request's KV sender: ``0..max_pages`` pages in a fragmented order, handed over in ``1..max_sends``
    non-empty sends as the scheduler makes them (one empty send when there are no pages), an aux index, and 0..3
    state lists passed with every send (none for a release before state payloads, ``DOMAIN.has("state_payloads")``)."""
    check_int("max_pages", max_pages)
    check_int("max_sends", max_sends, minimum=1)
    return _sender_cases(max_pages=max_pages, max_sends=max_sends)


@st.composite
def _sender_cases(draw: st.DrawFn, *, max_pages: int, max_sends: int) -> SenderCase:
    c = Choices(draw)
    n = c.integer(0, max_pages)
    pages = distinct_sample(c, 1, n + 64, n)
    cuts = sorted({c.integer(1, n - 1) for _ in range(c.integer(0, max_sends - 1))}) if n > 1 else []
    bounds = [0, *cuts, n]
    sends = tuple(tuple(pages[a:b]) for a, b in pairwise(bounds)) if n else ((),)
    state: tuple[tuple[int, ...], ...] = ()
    if DOMAIN.has("state_payloads"):  # a release before hybrid-model PD sends no state lists
        state = tuple(tuple(c.integer(0, 2**31 - 1) for _ in range(c.integer(0, 3))) for _ in range(c.integer(0, 3)))
    return SenderCase(num_pages=n, aux_index=c.integer(0, 2**31 - 1), sends=sends, state=state)


def bootstrap_cases(*, max_length: int = 96, max_page_size: int = 16) -> st.SearchStrategy[BootstrapCase]:
    """One request at bootstrap: a page size (1 for a release before paged transfer), a prompt of
    ``1..max_length`` tokens, a page-aligned decode prefix anywhere in ``[0, L]`` (0 for a release before decode-side
    prefixes), its metadata buffer and a bootstrap room (small or past 2**31)."""
    check_int("max_length", max_length)
    check_int("max_page_size", max_page_size, minimum=1)
    return _bootstrap_cases(max_length=max_length, max_page_size=max_page_size)


@st.composite
def _bootstrap_cases(draw: st.DrawFn, *, max_length: int, max_page_size: int) -> BootstrapCase:
    c = Choices(draw)
    ps = c.pick(page_size_list(max_page_size)) if DOMAIN.has("paged_transfer") else 1  # pages came with #5561
    n = c.integer(1, max(1, max_length))  # SGLang refuses an empty prompt
    room = c.integer(0, 64) if not c.boolean() else c.integer(2**31, 2**40)
    prefix = c.integer(0, n // ps) * ps if DOMAIN.decode_prefix else 0  # decode-side prefixes came in 0.5.11
    return BootstrapCase(ps, n, prefix, c.integer(0, 2**31 - 1), room)
