"""Oracle of the PD KV checksum end to end: plain Python over the case's page lists, no shared helper.

Both digests cover what is transferred and nothing else: the logical pages of ``[D, n)`` (``D`` page-aligned, so
the first is page ``D // page_size``; the last is the partial page holding token ``n - 1``), on prefill's row what
prefill sends, on decode's row where it lands - and, where the pool registers block scales (``mxfp8``), those pages'
scale items too: a page's scales travel and are digested with it. A page-granular transfer copies every byte the two
digests read, so decode accepts the request.
"""

from __future__ import annotations

from pdverify.model.checksum import ChecksumCase


def logical_pages(case: ChecksumCase) -> list[int]:
    """The logical pages of ``[D, n)``."""
    first = case.decode_prefix // case.page_size
    last = (case.prompt + case.outputs - 1) // case.page_size
    return list(range(first, last + 1))


def prefill_digest(case: ChecksumCase) -> list[int]:
    """The pages of prefill's row that it sends and digests."""
    return [case.prefill_pages[i] for i in logical_pages(case)]


def decode_digest(case: ChecksumCase) -> list[int]:
    """The pages of decode's row the transfer lands on and decode digests."""
    return [case.decode_pages[i] for i in logical_pages(case)]


def prefill_state_digest(case: ChecksumCase) -> list[int]:
    """The block-scale items prefill digests: a page's scales with the page (none when the pool registers none)."""
    return prefill_digest(case) if case.kv_cache_dtype == "mxfp8" else []


def decode_state_digest(case: ChecksumCase) -> list[int]:
    """The block-scale items decode digests, likewise on its own pages."""
    return decode_digest(case) if case.kv_cache_dtype == "mxfp8" else []
