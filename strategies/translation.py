"""Strategies for virtual-to-physical token-id translation: ``token_translations``."""

from __future__ import annotations

from hypothesis import strategies as st

from pdverify.model.translation import OUT_MODES, TranslateCase
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.layouts import page_size_list, pick_page_size


def token_translations(
    *, max_ids: int = 24, max_pages: int = 12, max_page_size: int = 16
) -> st.SearchStrategy[TranslateCase]:
    """One ``translate_token_ids`` call: a page size; a page table of ``1..max_pages`` virtual pages (entry 0 the
    sink; the others distinct physical pages - low, or past int32 in token ids - or unmapped: 0, or -1); 1-D ids or
    2-D rows of up to ``max_ids`` ids, int32 or int64, each a valid id, padding (-1) or past the table; decode
    context parallelism off or ``2..4`` ranks with this rank; a fresh result, a caller's ``out``, or a packed
    ``out`` with ``out_width`` past the ids and spare lanes past that. The first choice is a lean
    (``Choices.lean``): under one, the simplest call has a page size above 1, unmapped and sink entries in its
    table, ids past int32, decode context parallelism on at rank 1, every kind of id (valid, padding, past the
    table) and a caller's buffer (lean 2: 2-D rows into ``out``; otherwise 1-D into a packed ``out``)."""
    check_int("max_ids", max_ids)
    check_int("max_pages", max_pages, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    return _token_translations(max_ids=max_ids, max_pages=max_pages, max_page_size=max_page_size)


@st.composite
def _token_translations(draw: st.DrawFn, *, max_ids: int, max_pages: int, max_page_size: int) -> TranslateCase:
    c = Choices(draw)
    c.lean()
    ps = pick_page_size(c, page_size_list(max_page_size))
    pages = c.integer(1, max_pages, lean=5)
    low = 1 if not c.boolean(lean=True) else 2**31 // ps + 1
    physical = distinct_sample(c, low, low + pages + 32, pages)
    # under a lean, each kind of table entry in turn: mapped, unmapped (0), -1
    v2p = [0] + [(physical[v], physical[v], physical[v], 0, -1)[c.integer(0, 4, lean=v % 5)] for v in range(1, pages)]
    dcp = c.integer(2, 4) if c.boolean(lean=True) else 1
    rank = c.integer(0, dcp - 1, lean=1)
    two_d = c.boolean(lean=(2,))
    rows, cols = (
        (c.integer(1, 3, lean=2), c.integer(0, max_ids // 2, lean=8)) if two_d else (1, c.integer(0, max_ids, lean=8))
    )
    span = pages * ps * dcp
    position = iter(range(rows * cols))

    def one() -> int:
        p = next(position)
        kind = c.integer(0, 7, lean=p % 8)  # under a lean, each kind of id in turn
        if kind == 6:
            return -1  # padding
        if kind == 7:
            return span + c.integer(0, 3 * ps * dcp)  # past the table
        return c.integer(0, span - 1, lean=p * (ps + 1) % span)

    loc = tuple(tuple(one() for _ in range(cols)) for _ in range(rows))
    mode = c.pick(OUT_MODES, lean=2) if not two_d else c.pick(OUT_MODES[:2], lean=1)
    count = rows * cols
    return TranslateCase(
        page_size=ps,
        loc=loc,
        v2p=tuple(v2p),
        dtype=c.pick(("int32", "int64"), lean=c.leaning % 2),
        two_d=two_d,
        dcp_size=dcp,
        dcp_rank=rank,
        out_mode=mode,
        out_width=count + c.integer(0, 4, lean=1) if mode == "out_width" else 0,
        out_spare=c.integer(0, 3, lean=1) if mode == "out_width" else 0,
    )
