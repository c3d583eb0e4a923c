"""Strategies for the PD KV checksum end to end: ``checksum_cases``."""

from __future__ import annotations

from hypothesis import strategies as st

from pdverify.model.checksum import ChecksumCase
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.layouts import (
    boundary_length,
    boundary_prefix,
    draw_chunk_ends,
    page_size_list,
    pick_page_size,
)


def checksum_cases(
    *, max_prompt: int = 160, max_outputs: int = 160, max_page_size: int = 64, max_chunks: int = 4
) -> st.SearchStrategy[ChecksumCase]:
    """One request's KV handoff with the checksum on: a page size up to ``max_page_size`` (powers of two and odd
    sizes), a prompt of ``1..max_prompt`` tokens (half at a page boundary or one off it), then either a first
    handoff whose page-aligned decode prefix ``D`` lies anywhere in ``[0, prompt]`` (one time in four the largest),
    or - half the time, where the release has PD rebootstrap - a rebootstrap that kept ``0..max_outputs`` outputs
    (prompt + outputs half the time at a page boundary or one off it); prefill's chunk schedule (``1..max_chunks``
    chunks); each side's row on its own fragmented distinct pages (never page 0). The first choice is a lean
    (``Choices.lean``): under one the lengths go to page boundaries and the rows to fragmented pages."""
    check_int("max_prompt", max_prompt, minimum=1)
    check_int("max_outputs", max_outputs)
    check_int("max_page_size", max_page_size, minimum=1)
    check_int("max_chunks", max_chunks, minimum=1)
    return _checksum_cases(max_prompt=max_prompt, max_outputs=max_outputs, max_page_size=max_page_size,
                           max_chunks=max_chunks)  # fmt: skip


@st.composite
def _checksum_cases(
    draw: st.DrawFn, *, max_prompt: int, max_outputs: int, max_page_size: int, max_chunks: int
) -> ChecksumCase:
    c = Choices(draw)
    c.lean()
    ps = pick_page_size(c, page_size_list(max_page_size)) if DOMAIN.has("paged_transfer") else 1
    prompt = boundary_length(c, 1, max_prompt, ps)
    rebootstrap = DOMAIN.rebootstrap and c.boolean(lean=True)
    outputs = boundary_length(c, prompt, prompt + max_outputs, ps) - prompt if rebootstrap else 0
    d = boundary_prefix(c, prompt, ps) if DOMAIN.decode_prefix and not rebootstrap else 0
    n = prompt + outputs
    pages = -(-n // ps)
    return ChecksumCase(
        page_size=ps,
        prompt=prompt,
        prefill_pages=tuple(distinct_sample(c, 1, 4 * pages + 8, pages)),
        decode_pages=tuple(distinct_sample(c, 1, 4 * pages + 8, pages)),
        chunk_ends=tuple(draw_chunk_ends(c, n, max_chunks=max_chunks)),
        decode_prefix=d,
        rebootstrap=rebootstrap,
        outputs=outputs,
    )
