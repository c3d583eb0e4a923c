"""Port of SGLang 0.5.23's prefill scheduler path for one request, at its own granularity.

* A pipeline-parallel stage's bootstrap pass follows what the stages agreed - in 0.5.23 the first stage's poll,
  which ``poll_and_all_reduce_prefill_pp`` hands every stage: a request agreed failed is failed here
  (``handle_bootstrap_failure``), never finalised.
* ``finalize_bootstrap`` (``PrefillBootstrapQueue``): pops ``D``, sets ``start_send_idx = D`` and initialises
  the sender with ``kv_to_page_num(L - D, page_size)`` pages and the metadata buffer index (aux).
* ``maybe_send_cached_prefix_chunk``: the early send of the device-resident cached prefix ``prefix_len -
  host_hit_length`` (with staging, snapshotted at the first batch); skipped when it does not pass
  ``start_send_idx`` or is not page-aligned.
* ``_send_kv_chunk``: ``[start_send_idx, end)``; a non-last chunk ends on an absolute page boundary (with
  staging: on the grid ``D + k * grid``); ``end < start`` is skipped; the last chunk computes the state payloads;
  the range is split at ``D + k * limit`` (``compute_grid_segments``) when staging is on, or when the room's decode
  peer needs a DCP relayout and the manager has a pack limit (``get_max_transfer_tokens``: the prefill buffer
  ceiling rounded up to a page, ``_init_dcp_pack_buffers_once``); each segment is translated, paged and sent when
  it has pages or is the final segment of the last chunk; state goes with that final segment only.
* ``CommonKVSender``: ``send`` places a chunk at ``dst[curr_idx : curr_idx + n]``, flags it last when
  ``curr_idx`` reaches the initialised count, and forwards aux and state only then. With the ranks of a request
  sharing its transfer (``_prepare_send_indices``): a KV-sharded rank sends the pages it owns (``l % N``) as local
  ids (``l // N``) at their positions and skips a non-final chunk that owns none; an all-CP-ranks rank sends its
  contiguous share of the page list (the first ``total % N`` ranks one page more); a dummy CP rank sends nothing
  and reports success at the last chunk.

The page lists follow the row's dtype (int32), int64 after a translation, as upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pdverify.model.exchange import PrefillCase, PrefillTrace, Transfer
from pdverify.production.page_index import (
    PageIndices,
    kv_to_page_indices,
    kv_to_page_num,
    minimax_index_transfer_pages,
    suffix_page_indices,
)


@dataclass
class CommonSender:
    """``CommonKVSender``'s bookkeeping: the cumulative page counter and the last flag."""

    num_kv_indices: int = 0
    aux_index: int | None = None
    curr_idx: int = 0
    transfers: list[Transfer] = field(default_factory=list)
    early_send_wait: bool = False
    """An early send's completion event is pending: the next transfer carries it (and clears it)."""
    split: tuple[str, int, int] | None = None
    statuses: list[str] = field(default_factory=list)
    registrations: list[tuple[int, int]] = field(default_factory=list)
    concluded: bool = False
    """The transfer concluded (failed at bootstrap): every later send is dropped."""

    def open(self, case: PrefillCase) -> None:
        """``CommonKVSender.__init__``: the deferred room, the CP role, the attention-DP registration."""
        if case.deferred_room is not None:
            self.statuses.append("Bootstrapping")
            if case.deferred_room != "fresh":  # a duplicate or cancelled room fails the sender
                self.statuses.append("Failed")
                self.concluded = True
                return
        if self.split is not None and self.split[0] == "cp_rank0" and self.split[1] != 0:
            self.statuses.append("WaitingForInput")
            return
        self.statuses.append("Bootstrapping")
        if case.attention_dp is not None:
            ranks, dp_rank, method, placed = case.attention_dp
            if placed:
                return
            if method == "query":
                self.registrations.append((case.bootstrap_room, dp_rank))
            elif dp_rank != case.bootstrap_room % ranks:
                self.statuses.append("Failed")

    def init(self, num_kv_indices: int, aux_index: int | None) -> None:
        self.num_kv_indices, self.aux_index = num_kv_indices, aux_index

    def _share(self, values: list[int], start: int, is_last: bool) -> tuple[list[int], int, int, Any] | None:
        """This rank's part of a chunk placed at ``[start, start + len(values))``: its pages, the destination
        range, and the positions when they replace the range (None: the chunk is skipped)."""
        stop = start + len(values)
        if self.split is None:
            return values, start, stop, None
        mode, rank, size = self.split
        if mode == "kv_shard":
            owned = [k for k, v in enumerate(values) if v % size == rank]
            if not owned and not is_last:
                return None
            return [values[k] // size for k in owned], 0, 0, tuple(start + k for k in owned)
        if mode == "cp_all":
            base, extra = divmod(self.num_kv_indices, size)
            lo = rank * base + min(rank, extra)
            hi = lo + base + (1 if rank < extra else 0)
            first, last = max(lo, start), min(hi, stop)
            if last <= first:
                return [], start, start, None
            return values[first - start : last - start], first, last, None
        if rank != 0:  # a dummy CP rank
            if is_last:
                self.statuses.append("Success")
            return None
        return values, start, stop, None

    @staticmethod
    def should_send_kv_chunk(num_pages: int, last_chunk: bool) -> bool:
        return num_pages > 0 or last_chunk

    def send(self, pages: Any, state: list[PageIndices] | None, num_kv_tokens: int) -> None:
        """``pages``: a host numpy array, or a host torch tensor on the host-tensor path."""
        if self.concluded:
            return
        start = self.curr_idx
        self.curr_idx += len(pages)
        is_last = self.curr_idx == self.num_kv_indices
        share = self._share([int(p) for p in pages], start, is_last)
        if share is None:
            return
        values, first, last, positions = share
        waits, self.early_send_wait = self.early_send_wait, False
        self.transfers.append(
            Transfer(
                pages=tuple(values),
                dtype=str(pages.dtype).removeprefix("torch."),
                start=first,
                stop=last,
                positions=positions,
                is_last=is_last,
                aux_index=self.aux_index if is_last else None,
                state=tuple(tuple(int(v) for v in s) for s in state) if is_last and state is not None else None,
                num_kv_tokens=num_kv_tokens,
                waits_on_forward=waits,
            )
        )


def max_transfer_tokens(case: PrefillCase) -> int | None:
    """``CommonKVSender.get_max_transfer_tokens``: the manager's DCP pack limit - the prefill buffer ceiling rounded
    up to a page (``_init_dcp_pack_buffers_once``'s ``ceil_align``) - where the room's decode peer needs a
    relayout; None otherwise."""
    if case.dcp_max_tokens is None or not case.dcp_relayout:
        return None
    ps = case.page_size
    return (case.dcp_max_tokens + ps - 1) // ps * ps


def grid_segments(start: int, end: int, base: int, grid: int) -> list[tuple[int, int]]:
    """``[start, end)`` split at ``base + k * grid``; an empty range is one empty segment."""
    if end <= start:
        return [(start, end)]
    segments, s = [], start
    while s < end:
        e = min(end, base + ((s - base) // grid + 1) * grid)
        segments.append((s, e))
        s = e
    return segments


@dataclass
class PrefillRequest:
    case: PrefillCase
    table: torch.Tensor
    sender: CommonSender
    start_send_idx: int = 0
    decode_prefix: int = 0
    early_send_prefix_end: int | None = None
    metadata_sets: int = 0
    digests: list[tuple[int, ...] | None] = field(default_factory=list)


def _swa_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    ps = req.case.page_size
    start = max(req.decode_prefix, seq_len - req.case.window)
    start = (start // ps) * ps
    return kv_to_page_indices(translate_swa(req.case, req.table[req.case.req_pool_idx, start:seq_len]), ps)


def translate_swa(case: PrefillCase, kv: torch.Tensor) -> torch.Tensor:
    """``translate_swa_indices_for_transfer``: full-pool ids to the SWA pool's through the full-to-SWA map (int64;
    page ``i`` of the row holds ``swa_pages[i]``), or the identity without an SWA pool of its own."""
    if case.swa_pages is None:
        return kv
    ps = case.page_size
    mapping = torch.zeros(max(case.row) + 1, dtype=torch.int64, device=kv.device)
    for i, loc in enumerate(case.row):
        mapping[loc] = case.swa_pages[i // ps] * ps + i % ps
    return mapping[kv.to(torch.int64)]


def _full_kv_pages_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    return kv_to_page_indices(req.table[req.case.req_pool_idx, :seq_len], req.case.page_size)


def _minimax_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    row = req.table[req.case.req_pool_idx, :seq_len]
    return minimax_index_transfer_pages(row, page_size=req.case.page_size, prefix_len=req.decode_prefix)


def _dsa_pages_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    case = req.case
    return suffix_page_indices(req.table, case.req_pool_idx, req.decode_prefix, seq_len, case.page_size)


def _swa_ring_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    case = req.case
    positions = np.arange(max(0, seq_len - case.window), seq_len, dtype=np.int64)
    return (case.req_pool_idx * case.ring_size + positions % case.ring_size).astype(np.int32)


def _request_row_payload(req: PrefillRequest, seq_len: int) -> PageIndices:
    return np.array([req.case.req_pool_idx], dtype=np.int32)


PAYLOADS: dict[str, Callable[[PrefillRequest, int], PageIndices]] = {
    "SWA": _swa_payload,
    "BLOCK_SCALE_SWA": _swa_payload,
    "QSA_COMPRESSED": _full_kv_pages_payload,
    "MINIMAX_DENSE_KV": _full_kv_pages_payload,
    "BLOCK_SCALE": _full_kv_pages_payload,
    "MINIMAX_INDEX_K": _minimax_payload,
    "DSA": _dsa_pages_payload,
    "SWA_RING": _swa_ring_payload,
    "REQUEST_ROW": _request_row_payload,
}
"""State type -> its payload on the last chunk (upstream's ``payloads`` dict of closures)."""


def state_payloads(req: PrefillRequest, seq_len: int) -> list[PageIndices]:
    return [PAYLOADS[kind](req, seq_len) for kind in req.case.state_types]


def host_tensor_pages(kv: torch.Tensor, page_size: int) -> torch.Tensor:
    """The host-tensor path's inline formula: stride and divide on the device, copy into a host tensor (pinned,
    behind a CUDA event upstream)."""
    return (kv[::page_size] // page_size).cpu()


def translate(case: PrefillCase, kv: torch.Tensor) -> torch.Tensor:
    """``translate_kv_indices_for_transfer``: virtual to physical ids through the page table (int64), or the
    identity."""
    if case.translation is None:
        return kv
    v2p = torch.tensor(case.translation, dtype=torch.int64, device=kv.device)
    wide = kv.to(torch.int64)
    return v2p[wide // case.page_size] * case.page_size + wide % case.page_size


def send_kv_chunk(req: PrefillRequest, extend_end: int, *, last_chunk: bool, end_idx: int | None = None) -> None:
    """``_send_kv_chunk``: send ``[start_send_idx, end)`` for a chunk that reached ``extend_end``."""
    case, ps = req.case, req.case.page_size
    start = req.start_send_idx
    end = end_idx if end_idx is not None else min(extend_end, case.length)
    if not last_chunk:
        end -= end % ps
        if case.grid is not None:
            end = req.decode_prefix + ((end - req.decode_prefix) // case.grid) * case.grid
    if end < start:
        return
    state = None
    if last_chunk:
        req.metadata_sets += 1
        state = state_payloads(req, min(extend_end, case.length))
    limit = case.grid if case.grid is not None else max_transfer_tokens(case)
    segments = grid_segments(start, end, req.decode_prefix, limit) if limit is not None else [(start, end)]
    row = req.table[case.req_pool_idx]
    for s, e in segments:
        kv = translate(case, row[s:e])
        pages: Any = host_tensor_pages(kv, ps) if case.host_tensor_indices else kv_to_page_indices(kv, ps)
        final = last_chunk and e == end
        if not req.sender.should_send_kv_chunk(len(pages), final):
            continue
        req.sender.send(pages, state if final else None, num_kv_tokens=e - s)
    req.start_send_idx = end


def digest_kv(req: PrefillRequest, extend_end: int) -> None:
    """``send_kv_chunk``'s KV checksum on the last chunk: the digest reads the pages the request sends for
    ``[D, end)``, as the transfer addresses them (translated to physical ids where the pool translates); a
    health-check request is set to 0 undigested. One difference from sglang 0.5.23, which digests the
    untranslated ids (finding F2, ``findings/sglang-0.5.23.json``)."""
    case = req.case
    if not case.kv_checksum:
        return
    if case.health_check:
        req.digests.append(None)
        return
    end = min(extend_end, case.length)
    kv = translate(case, req.table[case.req_pool_idx, req.decode_prefix : end])
    req.digests.append(tuple(int(p) for p in kv_to_page_indices(kv, case.page_size)))


def maybe_send_cached_prefix_chunk(req: PrefillRequest, extend_end: int) -> None:
    """The early send of the device-resident cached prefix (staging: snapshotted at the first batch); off by its
    environment switch, held back while the request bootstraps or a load-back of its batch is pending."""
    case = req.case
    if case.early_prefix is None or not case.early_send_env:
        return
    prefix_len = case.early_prefix + case.host_hit_length  # the request's whole cached prefix
    if case.grid is not None and req.early_send_prefix_end is None:
        req.early_send_prefix_end = max(0, prefix_len - case.host_hit_length)
    if case.early_send_blocked is not None:
        return
    cached_end = req.early_send_prefix_end if case.grid is not None else prefix_len - case.host_hit_length
    assert cached_end is not None
    if cached_end <= req.start_send_idx or cached_end % case.page_size:
        return
    if case.overlap:  # the prior step's forward may still write these pages: the transfer must wait for it
        req.sender.early_send_wait = True
    send_kv_chunk(req, extend_end, last_chunk=False, end_idx=cached_end)


def prefill_exchange(case: PrefillCase, device: str) -> PrefillTrace:
    """Bootstrap, the early send, then every chunk of ``case`` (the last one last)."""
    width = case.length + case.page_size
    table = torch.zeros((case.req_pool_idx + 1, width), dtype=torch.int32, device=device)
    table[case.req_pool_idx, : case.length] = torch.tensor(case.row, dtype=torch.int32, device=device)
    req = PrefillRequest(case, table, CommonSender(split=case.rank_split))
    req.sender.open(case)
    if case.early_send_blocked == "bootstrapping":  # the first batch runs before bootstrap completes
        maybe_send_cached_prefix_chunk(req, case.chunk_ends[0])
    if case.pp_consensus == "bad":  # the PP stages agreed it failed: this stage fails it too, whatever it polls
        failed = PrefillTrace(0, req.sender.transfers, [req.start_send_idx], bootstraps=[False], dropped=True)
        failed.statuses, failed.registrations = req.sender.statuses, req.sender.registrations
        return failed
    # finalize_bootstrap: polled until a metadata buffer is free (one the request holds is kept); a PP stage whose
    # own sender bootstraps late is first polled while the stages have not agreed (that poll one of the buffer's)
    waits = 0 if case.held_buffer else case.buffer_waits
    bootstraps = [False] * max(waits, int(case.pp_own_late)) + [True]
    req.decode_prefix = req.start_send_idx = case.decode_prefix
    req.sender.init(kv_to_page_num(case.length - case.decode_prefix, case.page_size), case.aux_index)
    trace = PrefillTrace(req.sender.num_kv_indices, req.sender.transfers, [req.start_send_idx])
    trace.bootstraps, trace.buffers_taken = bootstraps, 0 if case.held_buffer else 1
    trace.dropped = "Failed" in req.sender.statuses  # a sender failed at its creation polls Failed at bootstrap
    for k, end in enumerate(case.chunk_ends):
        if k == 0:
            if case.early_send_blocked != "bootstrapping":
                maybe_send_cached_prefix_chunk(req, end)
            trace.start_send_idx.append(req.start_send_idx)
        last = k == len(case.chunk_ends) - 1
        if last:
            digest_kv(req, end)
        send_kv_chunk(req, end, last_chunk=last)
        trace.start_send_idx.append(req.start_send_idx)
    trace.metadata_sets = req.metadata_sets
    trace.digests = req.digests
    trace.statuses = req.sender.statuses
    trace.registrations = req.sender.registrations
    return trace
