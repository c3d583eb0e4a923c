"""Virtual-to-physical token-id translation (``translate_token_ids``): the lookup every translated transfer goes
through (the unified pools' ``translate_kv_loc``), checked lane by lane against the oracle
(``pdverify.oracle.translation``).

T1: every id maps to its physical id through the page table - the offset kept - and padding, ids past the table
and other DCP ranks' ids to 0; the result is int64 on the ids' device, in their shape. T2: with ``out=`` the
result is the caller's tensor, written in place; with ``out_width`` the lanes past the ids up to the width are
cleared and those past the width are left as they were.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import example

from pdverify.model.translation import TranslateCase
from pdverify.oracle.translation import translated
from pdverify.properties.registry import note_event, prop
from pdverify.strategies.translation import token_translations
from pdverify.targets import Target

NEEDS = ("translate_token_ids",)
SENTINEL = 7777
"""What a caller's ``out`` holds before the call, so that untouched lanes show."""

# ps 4; pages 1, 2, 3 -> 12, 0 (unmapped), 2**29 + 5; ids 4..7 on page 1, 9 (page 2), 13 (page 3), padding, past
SPEC = TranslateCase(4, ((4, 5, 6, 7, 9, 13, -1, 16),), (0, 12, 0, 2**29 + 5))


def _call(target: Target, case: TranslateCase, device: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    dtype = getattr(torch, case.dtype)
    loc = torch.tensor(case.loc if case.two_d else case.loc[0], dtype=dtype, device=device)
    v2p = torch.tensor(case.v2p, dtype=torch.int64, device=device)
    kw: dict[str, Any] = {"loc": loc, "v2p": v2p, "page_size": case.page_size}
    if case.dcp_size > 1:
        kw.update(dcp_size=case.dcp_size, dcp_rank=case.dcp_rank)
    out = None
    if case.out_mode == "out":
        out = torch.full(loc.shape, SENTINEL, dtype=torch.int64, device=device)
        kw["out"] = out
    elif case.out_mode == "out_width":
        out = torch.full((case.out_width + case.out_spare,), SENTINEL, dtype=torch.int64, device=device)
        kw.update(out=out, out_width=case.out_width)
    note_event(f"out: {case.out_mode}; dcp {case.dcp_size}; {case.dtype}{' 2-D' if case.two_d else ''}")
    return target.require("translate_token_ids")(**kw), out


@example(case=SPEC)
@example(case=TranslateCase(4, ((4, 5, 6, 7), (9, 13, -1, 16)), (0, 12, 0, 2**29 + 5), dtype="int32", two_d=True))
@example(case=TranslateCase(2, ((0, 1, 2, 3, 4, 5, 6, 7, 8),), (0, 3, 9), dcp_size=2, dcp_rank=1))
@prop(
    "T1",
    "translate_token_ids maps every virtual token id through the page table (v2p[id // ps] * ps + id % ps) and "
    "padding, ids past the table and other DCP ranks' ids to 0; int64, on the ids' device, in their shape",
    needs=NEEDS,
    case=token_translations(),
)
def test_t1_translation(target: Target, device: str, case: TranslateCase) -> None:
    got, _ = _call(target, case, device)
    want = translated(case)
    assert got.dtype == torch.int64, f"result dtype {got.dtype}, expected int64"
    assert got.device.type == torch.device(device).type, f"result on {got.device}, the ids on {device}"
    flat = [v for row in want for v in row]
    if case.out_mode == "out_width":
        values = got[: case.count].tolist()
    else:
        shape = (len(case.loc), len(case.loc[0])) if case.two_d else (len(case.loc[0]),)
        assert tuple(got.shape) == shape, f"result shape {tuple(got.shape)}, the ids' {shape}"
        values = got.reshape(-1).tolist()
    bad = [(i, v, w) for i, (v, w) in enumerate(zip(values, flat, strict=True)) if v != w]
    assert not bad, (
        f"lanes (index, got, expected) {bad[:8]} (ps {case.page_size}, v2p {case.v2p}, dcp {case.dcp_size}/"
        f"{case.dcp_rank}, ids {case.flat})"
    )


@example(case=TranslateCase(4, ((4, 9, -1),), (0, 12, 5), out_mode="out"))
@example(case=TranslateCase(4, ((4, 9, -1),), (0, 12, 5), out_mode="out_width", out_width=6, out_spare=2))
@example(case=TranslateCase(4, ((),), (0, 12), out_mode="out_width", out_width=3, out_spare=1))
@prop(
    "T2",
    "with out= the result is the caller's tensor, written in place; with out_width the lanes past the ids up to the "
    "width are cleared and the lanes past the width are left as they were",
    needs=NEEDS,
    case=token_translations(),
)
def test_t2_out_buffers(target: Target, device: str, case: TranslateCase) -> None:
    got, out = _call(target, case, device)
    if out is None:
        return
    assert got.data_ptr() == out.data_ptr() and got.shape == out.shape, "the result is not the caller's out tensor"
    want = [v for row in translated(case) for v in row]
    if case.out_mode == "out":
        assert out.reshape(-1).tolist() == want, f"out holds {out.reshape(-1).tolist()}, expected {want}"
        return
    lanes = out.tolist()
    n, width = case.count, case.out_width
    assert lanes[:n] == want, f"lanes [0, {n}) hold {lanes[:n]}, expected {want}"
    assert lanes[n:width] == [0] * (width - n), f"lanes [{n}, {width}) hold {lanes[n:width]}, expected zeros"
    assert lanes[width:] == [SENTINEL] * case.out_spare, (
        f"lanes past out_width={width} hold {lanes[width:]}, the caller's {SENTINEL}s must stay"
    )
