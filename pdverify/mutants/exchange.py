"""Faults in the scheduler-level prefill transfer and the metadata wire: the port with one piece replaced.

Each mutant runs pdverify's port (``pdverify.production.prefill_sender`` / ``wire``) with a single helper, payload
or sender rule swapped for a faulty one for the duration of the call - the kind of slip a change to SGLang's
scheduler, sender or state payloads could make.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
import torch

from pdverify.model.exchange import DecodeCase, DecodeTrace, PrefillCase, PrefillTrace, Transfer, WireMessage
from pdverify.model.sender import BootstrapCase, BootstrapTrace, SenderCase, SenderTrace
from pdverify.mutants.catalogue import mutant
from pdverify.production import decode_prealloc as decode_port
from pdverify.production import prefill_sender as port
from pdverify.production import sender as sender_port
from pdverify.production import wire
from pdverify.production.page_index import PageIndices, kv_to_page_indices

Payload = Callable[[port.PrefillRequest, int], PageIndices]


def _with_payload(kinds: tuple[str, ...], payload: Payload, case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.dict(port.PAYLOADS, dict.fromkeys(kinds, payload)):
        return port.prefill_exchange(case, device)


def _row(req: port.PrefillRequest) -> torch.Tensor:
    return req.table[req.case.req_pool_idx]


def _swa_row(req: port.PrefillRequest) -> torch.Tensor:
    """The row in the SWA pool (the port's own full-to-SWA translation)."""
    return port.translate_swa(req.case, _row(req))


# --- state payloads ---------------------------------------------------------------------------------


@mutant("XS01", "prefill_exchange", "off-by-page window", "SWA window starts one page late")
def swa_page_late(case: PrefillCase, device: str) -> PrefillTrace:
    def payload(req: port.PrefillRequest, seq_len: int) -> PageIndices:
        ps = req.case.page_size
        start = (max(req.decode_prefix, seq_len - req.case.window) // ps + 1) * ps
        return kv_to_page_indices(_swa_row(req)[start:seq_len], ps)

    return _with_payload(("SWA", "BLOCK_SCALE_SWA"), payload, case, device)


@mutant("XS02", "prefill_exchange", "dropped clamp", "SWA window ignores the decode prefix (starts before D)")
def swa_before_prefix(case: PrefillCase, device: str) -> PrefillTrace:
    def payload(req: port.PrefillRequest, seq_len: int) -> PageIndices:
        ps = req.case.page_size
        start = (max(0, seq_len - req.case.window) // ps) * ps
        return kv_to_page_indices(_swa_row(req)[start:seq_len], ps)

    return _with_payload(("SWA", "BLOCK_SCALE_SWA"), payload, case, device)


@mutant("XS03", "prefill_exchange", "dropped alignment", "SWA window start not floored to a page")
def swa_unaligned(case: PrefillCase, device: str) -> PrefillTrace:
    def payload(req: port.PrefillRequest, seq_len: int) -> PageIndices:
        start = max(req.decode_prefix, seq_len - req.case.window)
        return kv_to_page_indices(_swa_row(req)[start:seq_len], req.case.page_size)

    return _with_payload(("SWA", "BLOCK_SCALE_SWA"), payload, case, device)


@mutant("XS04", "prefill_exchange", "wrong origin", "DSA suffix from 0 instead of D")
def dsa_from_zero(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_payload(("DSA",), lambda req, n: kv_to_page_indices(_row(req)[:n], req.case.page_size), case, device)


@mutant("XS05", "prefill_exchange", "wrong origin", "MiniMax index-K from 0 instead of D")
def minimax_from_zero(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_payload(
        ("MINIMAX_INDEX_K",), lambda req, n: kv_to_page_indices(_row(req)[:n], req.case.page_size), case, device
    )


@mutant("XS06", "prefill_exchange", "wrong origin", "full-from-0 lists start at D (prefix pages dropped)")
def full_from_prefix(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_payload(
        ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"),
        lambda req, n: kv_to_page_indices(_row(req)[req.decode_prefix : n], req.case.page_size),
        case,
        device,
    )


@mutant("XS07", "prefill_exchange", "off-by-one slice", "full-from-0 lists stop one token early")
def full_one_short(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_payload(
        ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"),
        lambda req, n: kv_to_page_indices(_row(req)[: max(0, n - 1)], req.case.page_size),
        case,
        device,
    )


@mutant("XS08", "prefill_exchange", "dropped modulo", "SWA ring rows without the ring modulo")
def ring_no_modulo(case: PrefillCase, device: str) -> PrefillTrace:
    def payload(req: port.PrefillRequest, seq_len: int) -> PageIndices:
        c = req.case
        positions = np.arange(max(0, seq_len - c.window), seq_len, dtype=np.int64)
        return (c.req_pool_idx * c.ring_size + positions).astype(np.int32)

    return _with_payload(("SWA_RING",), payload, case, device)


@mutant("XS09", "prefill_exchange", "wrong source", "request row payload names the next row")
def request_row_next(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_payload(
        ("REQUEST_ROW",), lambda req, n: np.array([req.case.req_pool_idx + 1], dtype=np.int32), case, device
    )


@mutant("XS10", "prefill_exchange", "reordered result", "state lists in reverse state-type order")
def state_reversed(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.state_payloads
    with mock.patch.object(port, "state_payloads", lambda req, n: original(req, n)[::-1]):
        return port.prefill_exchange(case, device)


# --- the sender -------------------------------------------------------------------------------------


class _Sender(port.CommonSender):
    fault = ""

    def send(self, pages: PageIndices, state: list[PageIndices] | None, num_kv_tokens: int) -> None:
        start = self.curr_idx
        advance = 0 if self.fault == "no-advance" else len(pages)
        self.curr_idx += advance
        is_last = self.curr_idx == self.num_kv_indices
        if self.fault == "early-last":
            is_last = self.curr_idx >= self.num_kv_indices - 1
        gated = is_last or self.fault == "aux-always"
        self.transfers.append(
            Transfer(
                tuple(int(p) for p in pages),
                str(pages.dtype),
                start,
                start + len(pages),
                is_last,
                self.aux_index if gated else None,
                None
                if state is None or not is_last or self.fault == "state-dropped"
                else tuple(tuple(int(v) for v in s) for s in state),
                num_kv_tokens,
            )
        )


def _faulty_sender(fault: str) -> Any:
    """``port.CommonSender`` replaced, for a ``with`` block, by ``_Sender`` with ``fault``."""
    return mock.patch.object(port, "CommonSender", type("FaultySender", (_Sender,), {"fault": fault}))


def _with_sender(fault: str, case: PrefillCase, device: str) -> PrefillTrace:
    with _faulty_sender(fault):
        return port.prefill_exchange(case, device)


@mutant("XK01", "prefill_exchange", "dropped guard", "the sender forwards aux on every send")
def aux_always(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_sender("aux-always", case, device)


@mutant("XK02", "prefill_exchange", "wrong condition", "the sender flags last one page early")
def early_last(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_sender("early-last", case, device)


@mutant("XK03", "prefill_exchange", "missing update", "the sender's page counter never advances")
def counter_stuck(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_sender("no-advance", case, device)


@mutant("XK04", "prefill_exchange", "dropped payload", "the last transfer goes out without its state lists")
def state_dropped(case: PrefillCase, device: str) -> PrefillTrace:
    return _with_sender("state-dropped", case, device)


@mutant("XK05", "prefill_exchange", "wrong rounding", "sender initialised with floor((L - D) / ps) pages")
def init_floor(case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port, "kv_to_page_num", lambda n, ps: n // ps):
        return port.prefill_exchange(case, device)


@mutant("XK06", "prefill_exchange", "dropped send", "a zero-page last transfer is not sent")
def no_zero_last(case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port.CommonSender, "should_send_kv_chunk", staticmethod(lambda n, last: n > 0)):
        return port.prefill_exchange(case, device)


# --- segments, grid, early send, translation ----------------------------------------------------------


@mutant("XG01", "prefill_exchange", "wrong base", "DCP / grid segments split from token 0 instead of D")
def segments_from_zero(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.grid_segments
    with mock.patch.object(port, "grid_segments", lambda s, e, base, grid: original(s, e, 0, grid)):
        return port.prefill_exchange(case, device)


@mutant("XG02", "prefill_exchange", "off-by-page limit", "segments one page longer than the pack limit")
def segments_too_long(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.grid_segments
    with mock.patch.object(port, "grid_segments", lambda s, e, base, grid: original(s, e, base, grid + case.page_size)):
        return port.prefill_exchange(case, device)


@mutant("XG03", "prefill_exchange", "misaligned segments", "segment ends not page-aligned (split at grid - 1)")
def segments_misaligned(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.grid_segments
    with mock.patch.object(port, "grid_segments", lambda s, e, base, grid: original(s, e, base, max(1, grid - 1))):
        return port.prefill_exchange(case, device)


@mutant(
    "XG04",
    "prefill_exchange",
    "wrong rounding",
    "staging handled as a DCP limit: non-last sends end on a page, not on the grid",
)
def staging_page_floor(case: PrefillCase, device: str) -> PrefillTrace:
    if case.grid is None:
        return port.prefill_exchange(case, device)
    return port.prefill_exchange(replace(case, chunked_prefill_size=None, dcp_max_tokens=case.grid), device)


@mutant("XE01", "prefill_exchange", "missing update", "the early send does not advance start_send_idx (re-sent later)")
def early_not_advanced(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.maybe_send_cached_prefix_chunk

    def early(req: port.PrefillRequest, extend_end: int) -> None:
        before = req.start_send_idx
        original(req, extend_end)
        req.start_send_idx = before

    with mock.patch.object(port, "maybe_send_cached_prefix_chunk", early):
        return port.prefill_exchange(case, device)


@mutant("XE02", "prefill_exchange", "wrong flag", "early send sent as the last chunk")
def early_as_last(case: PrefillCase, device: str) -> PrefillTrace:
    def early(req: port.PrefillRequest, extend_end: int) -> None:
        cached = req.case.early_prefix
        if cached is not None and cached > req.start_send_idx and cached % req.case.page_size == 0:
            port.send_kv_chunk(req, extend_end, last_chunk=True, end_idx=cached)

    with mock.patch.object(port, "maybe_send_cached_prefix_chunk", early):
        return port.prefill_exchange(case, device)


@mutant(
    "XO01", "prefill_exchange", "dropped event", "overlap early send records the forward event but never hands it on"
)
def early_event_dropped(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, overlap=False), device)


@mutant("XO02", "prefill_exchange", "missing update", "the early send's event is never cleared: every later send waits")
def early_event_sticks(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.CommonSender.send

    def send(self: port.CommonSender, *args: object, **kwargs: object) -> None:
        pending = self.early_send_wait
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self.early_send_wait = pending

    with mock.patch.object(port.CommonSender, "send", send):
        return port.prefill_exchange(case, device)


@mutant("XO03", "prefill_exchange", "wrong condition", "the forward event is recorded without the overlap scheduler")
def early_event_always(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, overlap=True), device)


@mutant("XH01", "prefill_exchange", "wrong divisor", "host-tensor path strides but does not divide by page size")
def host_tensor_not_divided(case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port, "host_tensor_pages", lambda kv, ps: kv[::ps].cpu()):
        return port.prefill_exchange(case, device)


@mutant("XT01", "prefill_exchange", "dropped translation", "virtual ids sent untranslated")
def untranslated(case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port, "translate", lambda c, kv: kv):
        return port.prefill_exchange(case, device)


@mutant(
    "XT05", "prefill_exchange", "dropped translation", "the SWA window sent as full-pool pages (no full-to-SWA map)"
)
def swa_window_untranslated(case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port, "translate_swa", lambda c, kv: kv):
        return port.prefill_exchange(case, device)


@mutant(
    "XT06",
    "prefill_exchange",
    "wrong operand",
    "the SWA window paged first and its page ids looked up in the token-level full-to-SWA map",
)
def swa_pages_translated(case: PrefillCase, device: str) -> PrefillTrace:
    def payload(req: port.PrefillRequest, seq_len: int) -> PageIndices:
        ps = req.case.page_size
        start = (max(req.decode_prefix, seq_len - req.case.window) // ps) * ps
        pages = torch.as_tensor(kv_to_page_indices(_row(req)[start:seq_len], ps))
        return port.translate_swa(req.case, pages).cpu().numpy()

    return _with_payload(("SWA", "BLOCK_SCALE_SWA"), payload, case, device)


@mutant("XT02", "prefill_exchange", "wrong dtype", "translated ids narrowed back to int32")
def translated_int32(case: PrefillCase, device: str) -> PrefillTrace:
    original = port.translate
    with mock.patch.object(port, "translate", lambda c, kv: original(c, kv).to(torch.int32)):
        return port.prefill_exchange(case, device)


@mutant(
    "XT03",
    "prefill_exchange",
    "stale state",
    "only a request's first transfer is translated; later chunks go out virtual",
)
def translated_once(case: PrefillCase, device: str) -> PrefillTrace:
    original, calls = port.translate, [0]

    def first_only(c: PrefillCase, kv: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return original(c, kv) if calls[0] == 1 else kv.to(torch.int64)

    with mock.patch.object(port, "translate", first_only):
        return port.prefill_exchange(case, device)


@mutant(
    "XT04",
    "prefill_exchange",
    "wrong unit",
    "the page table is indexed by the token's offset-stripped id, not its page",
)
def table_by_token(case: PrefillCase, device: str) -> PrefillTrace:
    def by_token(c: PrefillCase, kv: torch.Tensor) -> torch.Tensor:
        if c.translation is None:
            return kv
        v2p = torch.tensor(c.translation, dtype=torch.int64, device=kv.device)
        wide = kv.to(torch.int64)
        return v2p[(wide - wide % c.page_size).clamp(max=len(c.translation) - 1)] * c.page_size + wide % c.page_size

    with mock.patch.object(port, "translate", by_token):
        return port.prefill_exchange(case, device)


# --- the wire -----------------------------------------------------------------------------------------


@mutant("XW01", "wire_roundtrip", "wrong dtype", "page list sent as int64 bytes, read back as int32")
def wire_int64(pages: npt.NDArray[np.integer], aux: int, state: list[list[int]], prefix: int) -> WireMessage:
    return wire.parse_frames(wire.build_frames(pages.astype(np.int64), aux, state, prefix))


@mutant("XW02", "wire_roundtrip", "dropped field", "decode_prefix_len not put on the wire")
def wire_no_prefix(pages: npt.NDArray[np.integer], aux: int, state: list[list[int]], prefix: int) -> WireMessage:
    frames = wire.build_frames(pages, aux, state, prefix)
    frames[8] = b""
    return wire.parse_frames(frames)


@mutant("XW03", "wire_roundtrip", "dropped element", "empty state lists dropped when packed")
def wire_drop_empty_state(pages: npt.NDArray[np.integer], aux: int, state: list[list[int]], prefix: int) -> WireMessage:
    return wire.parse_frames(wire.build_frames(pages, aux, [s for s in state if s], prefix))


# --- decode pre-allocation ----------------------------------------------------------------------------


@mutant("XD01", "decode_prealloc", "missing reservation", "no destination reserved for the pending restore (0.5.23)")
def no_restore_reservation(case: DecodeCase, device: str) -> DecodeTrace:
    with mock.patch.object(decode_port, "reserve_restore", lambda c, table, free: []):
        return decode_port.decode_prealloc(case, device)


@mutant("XD02", "decode_prealloc", "wrong origin", "main destination list from the L1 prefix instead of D")
def main_from_l1(case: DecodeCase, device: str) -> DecodeTrace:
    trace = decode_port.decode_prealloc(case, device)
    ps = case.page_size
    prefix_pages = tuple(case.l1_row[i] // ps for i in range(0, case.l1_prefix, ps))
    return replace(trace, pages=prefix_pages + trace.pages)


@mutant("XD03", "decode_prealloc", "wrong origin", "decode's DSA list from 0 instead of D")
def decode_dsa_from_zero(case: DecodeCase, device: str) -> DecodeTrace:
    from pdverify.production.page_index import suffix_page_indices

    with mock.patch.object(
        decode_port, "suffix_page_indices", lambda t, r, d, n, ps: suffix_page_indices(t, r, 0, n, ps)
    ):
        return decode_port.decode_prealloc(case, device)


@mutant("XD10", "decode_prealloc", "wrong value", "the tree owns only the L1 prefix while decode announces D")
def protected_l1_only(case: DecodeCase, device: str) -> DecodeTrace:
    return replace(decode_port.decode_prealloc(case, device), cache_protected_len=case.l1_prefix)


# --- the KV checksum ------------------------------------------------------------------------------------


def _with_digest(digest: Callable[[port.PrefillRequest, int], None], case: PrefillCase, device: str) -> PrefillTrace:
    with mock.patch.object(port, "digest_kv", digest):
        return port.prefill_exchange(case, device)


def _digest_range(req: port.PrefillRequest, start: int, end: int, *, translated: bool = True) -> tuple[int, ...]:
    case = req.case
    kv = req.table[case.req_pool_idx, start:end]
    if translated:
        kv = port.translate(case, kv)
    return tuple(int(p) for p in kv_to_page_indices(kv, case.page_size))


@mutant("XC01", "prefill_exchange", "untranslated ids", "the checksum digests the virtual row ids (0.5.23, F2)")
def digest_untranslated(case: PrefillCase, device: str) -> PrefillTrace:
    def digest(req: port.PrefillRequest, extend_end: int) -> None:
        if req.case.kv_checksum:
            end = min(extend_end, req.case.length)
            req.digests.append(
                None if req.case.health_check else _digest_range(req, req.decode_prefix, end, translated=False)
            )

    return _with_digest(digest, case, device)


@mutant("XC02", "prefill_exchange", "wrong origin", "the checksum digests the row from 0, the decode prefix included")
def digest_from_zero(case: PrefillCase, device: str) -> PrefillTrace:
    def digest(req: port.PrefillRequest, extend_end: int) -> None:
        if req.case.kv_checksum:
            end = min(extend_end, req.case.length)
            req.digests.append(None if req.case.health_check else _digest_range(req, 0, end))

    return _with_digest(digest, case, device)


@mutant("XC03", "prefill_exchange", "missing case", "a health-check request is digested like any other")
def digest_health_check(case: PrefillCase, device: str) -> PrefillTrace:
    def digest(req: port.PrefillRequest, extend_end: int) -> None:
        if req.case.kv_checksum:
            req.digests.append(_digest_range(req, req.decode_prefix, min(extend_end, req.case.length)))

    return _with_digest(digest, case, device)


@mutant("XC04", "prefill_exchange", "wrong range", "the checksum digests only what the last send ships")
def digest_last_send(case: PrefillCase, device: str) -> PrefillTrace:
    def digest(req: port.PrefillRequest, extend_end: int) -> None:
        if req.case.kv_checksum:
            end = min(extend_end, req.case.length)
            req.digests.append(None if req.case.health_check else _digest_range(req, req.start_send_idx, end))

    return _with_digest(digest, case, device)


@mutant("XC05", "prefill_exchange", "always on", "every request's last send sets a checksum, the flag off too")
def digest_always(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, kv_checksum=True), device)


# --- ranks sharing a request's transfer ---------------------------------------------------------------------


_SENDER = port.CommonSender
"""The port's sender, held here: the mutants below patch ``port.CommonSender`` with a subclass of it."""


def _with_share(share: Any, case: PrefillCase, device: str) -> PrefillTrace:
    sender = type("SplitSender", (_SENDER,), {"_share": share})
    with mock.patch.object(port, "CommonSender", sender):
        return port.prefill_exchange(case, device)


@mutant("XR01", "prefill_exchange", "missing conversion", "a KV-sharded rank sends global page ids, not local")
def shard_global_ids(case: PrefillCase, device: str) -> PrefillTrace:
    def share(self: Any, values: list[int], start: int, is_last: bool) -> Any:
        got = _SENDER._share(self, values, start, is_last)
        if got is None or self.split is None or self.split[0] != "kv_shard":
            return got
        positions = got[3]
        return [values[p - start] for p in positions], 0, 0, positions

    return _with_share(share, case, device)


@mutant("XR02", "prefill_exchange", "lost positions", "a KV-sharded rank's owned pages placed as one range")
def shard_as_range(case: PrefillCase, device: str) -> PrefillTrace:
    def share(self: Any, values: list[int], start: int, is_last: bool) -> Any:
        got = _SENDER._share(self, values, start, is_last)
        if got is None or self.split is None or self.split[0] != "kv_shard":
            return got
        return got[0], start, start + len(got[0]), None

    return _with_share(share, case, device)


@mutant(
    "XR03", "prefill_exchange", "wrong bounds", "an all-CP-ranks rank takes its share of each chunk, not of the list"
)
def cp_share_per_chunk(case: PrefillCase, device: str) -> PrefillTrace:
    def share(self: Any, values: list[int], start: int, is_last: bool) -> Any:
        if self.split is None or self.split[0] != "cp_all":
            return _SENDER._share(self, values, start, is_last)
        _, rank, size = self.split
        base, extra = divmod(len(values), size)
        lo = rank * base + min(rank, extra)
        hi = lo + base + (1 if rank < extra else 0)
        return values[lo:hi], start + lo, start + hi, None

    return _with_share(share, case, device)


@mutant("XR04", "prefill_exchange", "missing guard", "a dummy CP rank sends like rank 0")
def dummy_sends(case: PrefillCase, device: str) -> PrefillTrace:
    if case.rank_split is not None and case.rank_split[0] == "cp_rank0":
        case = replace(case, rank_split=("cp_rank0", 0, case.rank_split[2]))
    return port.prefill_exchange(case, device)


@mutant("XR05", "prefill_exchange", "missing report", "a dummy CP rank never reports success")
def dummy_silent(case: PrefillCase, device: str) -> PrefillTrace:
    trace = port.prefill_exchange(case, device)
    trace.statuses = [s for s in trace.statuses if s != "Success"]
    return trace


@mutant("XR06", "prefill_exchange", "wrong condition", "a KV-sharded rank skips its final chunk when it owns none")
def shard_skips_final(case: PrefillCase, device: str) -> PrefillTrace:
    def share(self: Any, values: list[int], start: int, is_last: bool) -> Any:
        got = _SENDER._share(self, values, start, is_last)
        if got is not None and self.split is not None and self.split[0] == "kv_shard" and not got[0]:
            return None
        return got

    return _with_share(share, case, device)


# --- the sender's creation: deferred rooms, attention DP, tracing -----------------------------------------------


def _with_open(open_: Any, case: PrefillCase, device: str) -> PrefillTrace:
    sender = type("OpeningSender", (_SENDER,), {"open": open_})
    with mock.patch.object(port, "CommonSender", sender):
        return port.prefill_exchange(case, device)


@mutant("XB01", "prefill_exchange", "ignored state", "a duplicate or cancelled deferred room does not fail the sender")
def room_not_checked(case: PrefillCase, device: str) -> PrefillTrace:
    def open_(self: Any, c: PrefillCase) -> None:
        _SENDER.open(self, replace(c, deferred_room="fresh" if c.deferred_room else None))

    return _with_open(open_, case, device)


@mutant("XB02", "prefill_exchange", "missing guard", "a sender failed at bootstrap still ships its sends")
def failed_sender_ships(case: PrefillCase, device: str) -> PrefillTrace:
    def open_(self: Any, c: PrefillCase) -> None:
        _SENDER.open(self, c)
        self.concluded = False

    return _with_open(open_, case, device)


@mutant("XB03", "prefill_exchange", "missing guard", "a request the router placed registers its DP rank again")
def placed_registers(case: PrefillCase, device: str) -> PrefillTrace:
    if case.attention_dp is not None:
        case = replace(case, attention_dp=(*case.attention_dp[:3], False))
    return port.prefill_exchange(case, device)


@mutant("XB04", "prefill_exchange", "wrong branch", "follow_bootstrap_room queries the bootstrap server like the rest")
def follow_room_queries(case: PrefillCase, device: str) -> PrefillTrace:
    if case.attention_dp is not None:
        case = replace(case, attention_dp=(*case.attention_dp[:2], "query", case.attention_dp[3]))
    return port.prefill_exchange(case, device)


@mutant("XB05", "prefill_exchange", "wrong value", "the DP registration names room % DP, not the sender's rank")
def registers_room_rank(case: PrefillCase, device: str) -> PrefillTrace:
    trace = port.prefill_exchange(case, device)
    if case.attention_dp is not None:
        trace.registrations = [(room, room % case.attention_dp[0]) for room, _ in trace.registrations]
    return trace


@mutant("XB06", "prefill_exchange", "dropped payload", "with tracing on, the last transfer loses its state lists")
def traced_state_dropped(case: PrefillCase, device: str) -> PrefillTrace:
    trace = port.prefill_exchange(case, device)
    if case.trace_requests:
        trace.transfers[:] = [replace(t, state=None) if t.is_last else t for t in trace.transfers]
    return trace


# --- the early send held back, the bootstrap's metadata buffer ------------------------------------------------


@mutant("XE03", "prefill_exchange", "ignored switch", "the early send ignores its environment switch")
def early_switch_ignored(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, early_send_env=True), device)


@mutant("XE04", "prefill_exchange", "missing guard", "the early send goes out while bootstrapping or a load-back runs")
def early_not_held(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, early_send_blocked=None), device)


@mutant("XE05", "prefill_exchange", "missing guard", "bootstrap finalises without a free metadata buffer")
def bootstrap_without_buffer(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, buffer_waits=0), device)


@mutant("XE06", "prefill_exchange", "lost state", "a request holding a metadata buffer takes another at bootstrap")
def held_buffer_replaced(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, held_buffer=False), device)


@mutant(
    "XD04", "decode_prealloc", "untranslated ids", "decode's SWA list built from full-pool ids (no full-to-SWA map)"
)
def swa_untranslated(case: DecodeCase, device: str) -> DecodeTrace:
    with mock.patch.object(decode_port, "swa_mapping", lambda c, table, free: {}):
        return decode_port.decode_prealloc(case, device)


@mutant(
    "XD13",
    "decode_prealloc",
    "untranslated ids",
    "decode's SWA list from full-pool ids where the SWA buffer holds the whole sequence (no tail pre-allocation)",
)
def swa_whole_untranslated(case: DecodeCase, device: str) -> DecodeTrace:
    lists = decode_port.state_lists

    def untranslated(c: DecodeCase, table: torch.Tensor, swa: dict[int, int] | None = None) -> Any:
        return lists(c, table, swa if c.swa_tail else None)

    with mock.patch.object(decode_port, "state_lists", untranslated):
        return decode_port.decode_prealloc(case, device)


@mutant("XD05", "decode_prealloc", "off by one", "the SWA tail starts a page late (one window page without SWA)")
def swa_tail_late(case: DecodeCase, device: str) -> DecodeTrace:
    with mock.patch.object(decode_port, "swa_tail_start", lambda c: c.fill_len - c.swa_tail_len + c.page_size):
        return decode_port.decode_prealloc(case, device)


@mutant("XD06", "decode_prealloc", "missing reset", "a reused row's DeepSeek-V4 request state is not cleared first")
def request_state_not_cleared(case: DecodeCase, device: str) -> DecodeTrace:
    return replace(decode_port.decode_prealloc(case, device), cleared_rows=())


@mutant("XD07", "decode_prealloc", "wrong end", "request-state index taken for fill_len + 1 instead of L")
def request_state_fill_len(case: DecodeCase, device: str) -> DecodeTrace:
    trace = decode_port.decode_prealloc(case, device)
    if "DSV4_REQUEST_STATE" not in case.state_types:
        return trace
    k = case.state_types.index("DSV4_REQUEST_STATE")
    index = decode_port.request_state_transfer_indices(trace.req_pool_idx, case.fill_len + 1, case.request_state)
    return replace(trace, state=(*trace.state[:k], tuple(int(v) for v in index), *trace.state[k + 1 :]))


@mutant("XD11", "decode_prealloc", "wrong stride", "the request-state ring page is not offset by the row's pages")
def request_state_row_unscaled(case: DecodeCase, device: str) -> DecodeTrace:
    def indices(row: int, seq_len: int, layout: tuple[int, bool, int]) -> np.ndarray:
        ratio, online, ring_size = layout
        if seq_len % ratio == 0:
            return np.empty((0,), dtype=np.int32)
        if ratio == 2 or online:
            return np.array([row], dtype=np.int32)
        return np.array([row + ((seq_len - 1) % ring_size) // ratio], dtype=np.int32)

    with mock.patch.object(decode_port, "request_state_transfer_indices", indices):
        return decode_port.decode_prealloc(case, device)


def _evict_pages(case: DecodeCase, device: str, count: Callable[[DecodeCase, int], int]) -> DecodeTrace:
    """The port with eviction page by page: ``count(case, free pages)`` leading evictable pages, whatever sequences
    they belong to (none when the radix cache is off or the count is not positive)."""

    def evict(c: DecodeCase, free: list[int]) -> list[int]:
        n = count(c, len(free))
        if c.decode_prefix == 0 or n <= 0:
            return []
        evicted = list(c.evictable_pages[:n])
        free[:0] = sorted(evicted)
        return evicted

    with mock.patch.object(decode_port, "evict", evict):
        return decode_port.decode_prealloc(case, device)


def _need(c: DecodeCase) -> int:
    """The pages the request needs for ``[L1, fill_len)``."""
    return -(-c.fill_len // c.page_size) - c.l1_prefix // c.page_size


@mutant(
    "XD08", "decode_prealloc", "over-eviction", "memory pressure evicts the request's whole need, not the shortfall"
)
def evict_whole_need(case: DecodeCase, device: str) -> DecodeTrace:
    return _evict_pages(case, device, lambda c, free: _need(c) if _need(c) > free else 0)


@mutant("XD09", "decode_prealloc", "wrong condition", "the radix cache is evicted by a page whenever it holds one")
def evict_always(case: DecodeCase, device: str) -> DecodeTrace:
    original = decode_port.evict

    def evict(c: DecodeCase, free: list[int]) -> list[int]:
        evicted = original(c, free)
        if not evicted and c.decode_prefix and c.evictable_pages:
            evicted = [c.evictable_pages[0]]
            free[:0] = evicted
        return evicted

    with mock.patch.object(decode_port, "evict", evict):
        return decode_port.decode_prealloc(case, device)


@mutant(
    "XD12", "decode_prealloc", "wrong granularity", "the radix cache evicts page by page, splitting a cached sequence"
)
def evict_by_page(case: DecodeCase, device: str) -> DecodeTrace:
    return _evict_pages(case, device, lambda c, free: _need(c) - free)


@mutant("XB07", "prefill_exchange", "wrong exit", "a dummy decode rank ends the DCP pack-limit lookup (no limit)")
def dummy_peer_hides_limit(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, dcp_max_tokens=None) if case.dummy_peer else case, device)


@mutant("XB08", "prefill_exchange", "missing guard", "the DCP pack limit splits every room's sends, whatever its peer")
def limit_for_every_peer(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, dcp_relayout=True), device)


@mutant("XB09", "prefill_exchange", "wrong rounding", "the DCP pack limit is the raw ceiling, not rounded up to a page")
def limit_not_page_aligned(case: PrefillCase, device: str) -> PrefillTrace:
    def raw(c: PrefillCase) -> int | None:
        return c.dcp_max_tokens if c.dcp_relayout else None

    with mock.patch.object(port, "max_transfer_tokens", raw):
        return port.prefill_exchange(case, device)


# --- the KV sender and bootstrap as units ---------------------------------------------------------------------


def _sender_unit(fault: str, case: SenderCase, device: str) -> SenderTrace:
    with _faulty_sender(fault):
        return sender_port.kv_sender(case, device)


@mutant("KS01", "kv_sender", "dropped guard", "the KV sender forwards aux on every send")
def unit_aux_always(case: SenderCase, device: str) -> SenderTrace:
    return _sender_unit("aux-always", case, device)


@mutant("KS02", "kv_sender", "wrong condition", "the KV sender flags last one page early")
def unit_early_last(case: SenderCase, device: str) -> SenderTrace:
    return _sender_unit("early-last", case, device)


@mutant("KS03", "kv_sender", "missing update", "the KV sender's page counter never advances")
def unit_counter_stuck(case: SenderCase, device: str) -> SenderTrace:
    return _sender_unit("no-advance", case, device)


@mutant("KS04", "kv_sender", "dropped payload", "the KV sender's last transfer goes out without its state lists")
def unit_state_dropped(case: SenderCase, device: str) -> SenderTrace:
    return _sender_unit("state-dropped", case, device)


@mutant("KB01", "bootstrap", "missing pop", "bootstrap reads decode's prefix for the room without popping it")
def prefix_not_popped(case: BootstrapCase, device: str) -> BootstrapTrace:
    return replace(sender_port.bootstrap(case, device), prefix_left=True)


@mutant("KB02", "bootstrap", "wrong origin", "bootstrap starts sending at 0, not at decode's prefix")
def bootstrap_from_zero(case: BootstrapCase, device: str) -> BootstrapTrace:
    return replace(sender_port.bootstrap(case, device), start_send_idx=0)


@mutant("KB03", "bootstrap", "wrong rounding", "bootstrap initialises the sender with floor((L - D) / ps) pages")
def bootstrap_floor(case: BootstrapCase, device: str) -> BootstrapTrace:
    return replace(sender_port.bootstrap(case, device), num_pages=(case.length - case.decode_prefix) // case.page_size)


@mutant("KB04", "bootstrap", "wrong condition", "bootstrap waits on a free metadata buffer as if none were free")
def bootstrap_never_done(case: BootstrapCase, device: str) -> BootstrapTrace:
    return replace(sender_port.bootstrap(case, device), finalized=False)


@mutant("KB05", "bootstrap", "wrong value", "bootstrap initialises the sender with the next metadata buffer")
def bootstrap_next_buffer(case: BootstrapCase, device: str) -> BootstrapTrace:
    return replace(sender_port.bootstrap(case, device), aux_index=case.aux_index + 1)


@mutant("XE07", "prefill_exchange", "missing term", "the early send ships the host hit still loading back too")
def early_includes_host_hit(case: PrefillCase, device: str) -> PrefillTrace:
    if case.early_prefix is not None and case.host_hit_length:
        case = replace(case, early_prefix=case.early_prefix + case.host_hit_length, host_hit_length=0)
    return port.prefill_exchange(case, device)


@mutant(
    "XP01",
    "prefill_exchange",
    "ignored argument",
    "a later PP prefill stage bootstraps by its own sender's poll, not by what the stages agreed (0.5.16's pass)",
)
def pp_own_poll(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, pp_consensus=None), device)


@mutant("XP02", "prefill_exchange", "wrong condition", "a later PP prefill stage fails every request, agreed or not")
def pp_always_failed(case: PrefillCase, device: str) -> PrefillTrace:
    return port.prefill_exchange(replace(case, pp_consensus="bad" if case.pp_consensus else None), device)


@mutant(
    "XP03",
    "prefill_exchange",
    "missing term",
    "a later PP prefill stage takes the first stage's poll alone as the agreement: its own late sender finalised "
    "before decode's destinations reach it, decode's prefix length not there yet (0)",
)
def pp_first_stage_alone(case: PrefillCase, device: str) -> PrefillTrace:
    if case.pp_own_late:
        case = replace(case, pp_own_late=False, decode_prefix=0)
    return port.prefill_exchange(case, device)


@mutant(
    "XP04",
    "prefill_exchange",
    "wrong condition",
    "a later PP prefill stage asserts its own sender finished bootstrapping for a request the first stage popped "
    "(0.5.6.post2's pass)",
)
def pp_asserts_own_ready(case: PrefillCase, device: str) -> PrefillTrace:
    if case.pp_own_late:
        raise AssertionError("assert poll == KVPoll.WaitingForInput or poll == KVPoll.Failed")
    return port.prefill_exchange(case, device)
