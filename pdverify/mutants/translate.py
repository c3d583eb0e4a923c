"""Faults in the virtual-to-physical token-id translation (``translate_token_ids``): pdverify's port with one
step dropped or changed."""

from __future__ import annotations

from typing import Any

import torch

from pdverify.mutants.catalogue import mutant


def _faulty(fault: str, **kw: Any) -> torch.Tensor:
    loc, v2p, ps = kw["loc"], kw["v2p"], kw["page_size"]
    dcp, rank = kw.get("dcp_size", 1), kw.get("dcp_rank", 0)
    out, out_width = kw.get("out"), kw.get("out_width")
    if fault == "fresh-result" and out is not None:
        out = None if out_width is None else torch.empty_like(out)
    elif out is None:
        out = torch.empty(loc.shape, dtype=torch.int64, device=loc.device)
    ids = loc.to(torch.int64)
    keep = ids >= 0 if fault != "padding" else torch.ones_like(ids, dtype=torch.bool)
    if dcp > 1:
        if fault != "other-ranks":
            keep &= ids % dcp == rank
        if fault != "undivided":
            ids = torch.div(ids, dcp, rounding_mode="floor")
    page = torch.div(ids, ps, rounding_mode="floor")
    if fault == "table-wrap":
        page = page % v2p.numel()
    else:
        keep &= page < v2p.numel()
    page = torch.where(keep, page, 0)
    offset = ids % ps if fault != "no-offset" else torch.zeros_like(ids)
    physical = (v2p[page.clamp(min=0)] * ps + offset).clamp_(min=0)
    physical = torch.where(keep, physical, torch.zeros_like(physical))
    if out is None:
        return physical
    if out_width is None:
        out.copy_(physical)
        return out
    n = loc.numel()
    out[:n].copy_(physical.reshape(-1))
    if fault == "tail-kept":
        return out
    end = out.numel() if fault == "clear-all" else int(out_width)
    out[n:end].zero_()
    return out


def _variant(fault: str) -> Any:
    def call(**kw: Any) -> torch.Tensor:
        return _faulty(fault, **kw)

    return call


for _id, _fault, _cls, _desc in (
    ("TT01", "padding", "missing mask", "padding ids (-1) looked up instead of cleared"),
    ("TT02", "other-ranks", "missing filter", "another DCP rank's ids kept"),
    ("TT03", "undivided", "missing step", "DCP ids not divided by the DCP width before the lookup"),
    ("TT04", "table-wrap", "wrong bound", "ids past the table wrap round it instead of clearing"),
    ("TT05", "no-offset", "lost offset", "the offset in the page dropped (page start only)"),
    ("TT06", "fresh-result", "ignored argument", "out= ignored: a fresh tensor is returned"),
    ("TT07", "tail-kept", "stale tail", "out_width lanes past the ids not cleared"),
    ("TT08", "clear-all", "wrong bound", "out_width clears the whole buffer, lanes past the width too"),
):
    mutant(_id, "translate_token_ids", _cls, _desc)(_variant(_fault))
