"""Oracle of ``translate_token_ids``, from its contract, over Python lists."""

from __future__ import annotations

from pdverify.model.translation import TranslateCase


def physical_id(case: TranslateCase, virtual: int) -> int:
    """One id: 0 for padding, another DCP rank's id or a page past the table; else the page looked up, the
    offset kept (never below 0)."""
    if virtual < 0:
        return 0
    if case.dcp_size > 1:
        if virtual % case.dcp_size != case.dcp_rank:
            return 0
        virtual //= case.dcp_size
    page, offset = divmod(virtual, case.page_size)
    if page >= len(case.v2p):
        return 0
    return max(case.v2p[page] * case.page_size + offset, 0)


def translated(case: TranslateCase) -> list[list[int]]:
    """The result's rows."""
    return [[physical_id(case, v) for v in row] for row in case.loc]
