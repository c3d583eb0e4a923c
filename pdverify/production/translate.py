"""Port of ``translate_token_ids`` (``sglang/kernels/ops/memory/virtual_slot.py``, sglang 0.5.23): virtual token
ids to physical ids through a page table, one tensor op per step on the ids' own device (the released CPU path;
CUDA runs a Triton kernel with the same contract).

An id keeps its offset in the page and its page is looked up: ``v2p[id // ps] * ps + id % ps``. Padding
(negative ids), ids past the table and - with decode context parallelism - ids of another rank (``id % dcp !=
rank``, the rest divided by ``dcp``) become 0. The result is int64: a fresh tensor of ``loc``'s shape, or the
caller's ``out`` written in place; with ``out_width`` the first ``out_width`` lanes of a packed 1-D ``out``,
those past the ids cleared. Unlike the released function, bad arguments raise ``ValueError`` naming the argument
(it asserts).
"""

from __future__ import annotations

import torch


def _check(loc: torch.Tensor, out: torch.Tensor, out_width: int | None) -> int:
    n = loc.numel()
    if out.dtype != torch.int64:
        raise ValueError(f"out: dtype must be int64 (as v2p), got {out.dtype}")
    if out_width is None:
        if out.shape != loc.shape:
            raise ValueError(f"out: shape {tuple(out.shape)} must match loc's {tuple(loc.shape)}")
        return n
    width = int(out_width)
    if not loc.is_contiguous():
        raise ValueError("loc: out_width writes a packed lane range, loc must be contiguous")
    if out.dim() != 1 or not out.is_contiguous() or out.numel() < width:
        raise ValueError(f"out: out_width={width} needs a packed 1-D out of at least {width} lanes")
    if width < n:
        raise ValueError(f"out_width: {width} is under the {n} ids (live lanes would be dropped)")
    return width


def translate_token_ids(
    *,
    loc: torch.Tensor,
    v2p: torch.Tensor,
    page_size: int,
    dcp_size: int = 1,
    dcp_rank: int = 0,
    out: torch.Tensor | None = None,
    out_width: int | None = None,
) -> torch.Tensor:
    if out is None:
        out = torch.empty(loc.shape, dtype=torch.int64, device=loc.device)
    width = _check(loc, out, out_width)
    if width == 0:
        return out
    ids = loc.to(torch.int64)
    keep = ids >= 0
    if dcp_size > 1:
        keep &= ids % dcp_size == dcp_rank
        ids = torch.div(ids, dcp_size, rounding_mode="floor")
    page = torch.div(ids, page_size, rounding_mode="floor")
    keep &= page < v2p.numel()
    page = torch.where(keep, page, 0)
    physical = (v2p[page] * page_size + ids % page_size).clamp_(min=0)
    physical = torch.where(keep, physical, torch.zeros_like(physical))
    if out_width is None:
        out.copy_(physical)
    else:
        n = loc.numel()
        out[:n].copy_(physical.reshape(-1))
        out[n:width].zero_()
    return out
