"""The PD KV checksum end to end, ported from SGLang 0.5.23 with the fixes of F3, F4 and F5 (``findings/<ID>/``):
``send_kv_chunk``'s digest on prefill, the page-granular transfer, ``_verify_kv_checksums`` on decode.

Each side digests ``page_indices_for_request(row, end, start=D)`` - its row's tokens ``[D, end)`` strided to page
ids - over its registered KV buffers, one item per page. Prefill's end is the tokens it computed; decode's is the
row ``prepare_for_prebuilt`` committed: the prompt plus the outputs but the last (the handoff token, whose KV is not
written yet), which for a rebootstrap is the prompt plus the outputs it kept. The buffers are host bytes standing
for the device KV (a page's bytes: its logical page, repeated; another request's elsewhere), so a digest of the
wrong pages differs from prefill's. A pool that registers state (an ``mxfp8`` pool's block scales, a hybrid SWA
pool's SWA KV and its scales, a DSA pool's index keys, a hybrid linear model's Mamba state, a MiniMax sparse pool's
indexer keys and dense KV) digests each state type by its own payload's index space and range: full pages of
``[D, n)`` for ``BLOCK_SCALE``, ``DSA``, ``QSA_COMPRESSED`` and the MiniMax types, SWA pages of
the window for ``SWA`` and ``BLOCK_SCALE_SWA``, the side's slot for ``MAMBA``, none for ``DSA_TAIL`` (sent as ring
slots within the row, not as items); ``compute`` refuses to digest registered state without indices.
"""

from __future__ import annotations

import zlib

import torch

from pdverify.model.checksum import METADATA_BUFFER_SLOTS, ChecksumCase, ChecksumTrace

PAGE_BYTES = 16
"""Bytes of one page item of the stand-in KV buffer."""


def page_indices_for_request(row: torch.Tensor, end: int, page_size: int, start: int = 0) -> torch.Tensor:
    """The page ids of the row's tokens ``[start, end)``: ``row[start:end][::page_size] // page_size``, int64 on the
    row's device (``start`` page-aligned)."""
    idx = row[start:end].to(torch.int64)
    return idx if page_size == 1 else idx[::page_size] // page_size


OTHER = {"prefill": b"\xa5", "decode": b"\x5a"}
"""A byte of what another request left in each side's items outside this request's pages (a busy pool's)."""


def state_indices(
    case: ChecksumCase, kv_pages: torch.Tensor, window_swa_pages: torch.Tensor, slot: torch.Tensor, row: torch.Tensor
) -> dict[str, torch.Tensor] | None:
    """The state indices a side digests, per registered state type, each by its own payload's index space and range
    (F4's and F5's fix: 0.5.21-0.5.23 give None for the MXFP8 pool and the SWA window's pages to every state type of
    a hybrid SWA pool; F6's: the Mamba slot to every state type of a hybrid linear pool); ``slot`` and ``row`` are
    the side's Mamba slot and request row. None for a pool that registers no state."""
    if not case.state_types:
        return None
    by_type = {"swa": window_swa_pages, "block_scale": kv_pages, "block_scale_swa": window_swa_pages,
               "dsa": kv_pages, "mamba": slot, "dsa_tail": kv_pages[:0], "qsa_pending": row,
               "qsa_compressed": kv_pages, "minimax_index_k": kv_pages, "minimax_dense_kv": kv_pages}  # fmt: skip
    return {kind: by_type[kind] for kind in case.state_types}


def digest(
    kv: dict[int, bytes],
    pages: torch.Tensor,
    states: dict[str, dict[int, bytes]],
    indices: dict[str, torch.Tensor] | None,
    other: bytes,
) -> tuple[int, tuple[int, ...], tuple[tuple[str, tuple[int, ...]], ...]]:
    """``KvChecksumComputer.compute``: Adler-32 over the KV items at ``pages`` then each state type's items at its
    indices (1 over none, as the kernel; an item outside the request holds ``other``), with the items read. Refuses
    registered state without indices."""
    if states and indices is None:
        raise AssertionError("state buffers are registered but compute() was given no state indices")
    read = tuple(int(p) for p in pages.cpu().tolist())
    parts = [kv.get(p, other) for p in read]
    state_read: list[tuple[str, tuple[int, ...]]] = []
    for kind, buffer in states.items():
        items = () if indices is None else tuple(int(p) for p in indices[kind].cpu().tolist())
        parts += [buffer.get(p, other) for p in items]
        state_read.append((kind, items))
    return (zlib.adler32(b"".join(parts)) if parts else 1), read, tuple(state_read)


def chunk_stop(end: int, page_size: int, last: bool) -> int:
    """Where a chunk's send stops: a non-last chunk at its last whole page (the partial page goes with a later
    chunk), the last at the request's end."""
    return end if last else end - end % page_size


def digest_start(decode_prefix: int) -> int:
    """Where both digests start: the prefix decode promised (0.5.23) - prefill never sent ``[0, D)``."""
    return decode_prefix


def verified_length(prompt: int, outputs: int) -> int:
    """Decode's row as ``prepare_for_prebuilt`` committed it when the batch is verified: the prompt and its outputs
    but the last (the handoff token, whose KV is not written yet) - F3's fix; SGLang 0.5.23 reads the prompt alone."""
    return prompt + max(outputs - 1, 0)


def metadata_landed(row: tuple[int, int]) -> bool:
    """Whether decode's metadata row ``(room, written)`` holds what prefill wrote: its written mark - F8's fix; SGLang
    0.5.9-0.5.23 read a room of 0 as "not yet written", so a request in room 0 waits for ever."""
    return row[1] != 0


def aux_slots(case: ChecksumCase) -> tuple[int, int]:
    """The aux transfer's source and destination rows: prefill's slot, decode's (``dst_aux_index``)."""
    return case.prefill_aux_index, case.decode_aux_index


def metadata_handoff(case: ChecksumCase) -> tuple[bool, str]:
    """The request's metadata row, prefill's slot to decode's: prefill writes ``(room, written)`` into its slot
    (``set_buf``), the aux transfer copies the slot's row into decode's slot (``send_aux``), whose row decode cleared
    when it was last freed (``clear_slot``); decode commits once the row has landed (the metadata gate), if the room
    is the request's (else it aborts: another request's row). Whether decode committed, and why not."""
    prefill_rows = [(0, 0)] * METADATA_BUFFER_SLOTS
    prefill_rows[case.prefill_aux_index] = (case.bootstrap_room, 1)
    decode_rows = [(0, 0)] * METADATA_BUFFER_SLOTS
    source, destination = aux_slots(case)
    decode_rows[destination] = prefill_rows[source]
    row = decode_rows[case.decode_aux_index]
    if not metadata_landed(row):
        return False, f"the metadata gate holds the request: its row {row} reads as not yet written"
    if row[0] != case.bootstrap_room:
        return False, f"metadata of room {row[0]} in the row of room {case.bootstrap_room}"
    return True, ""


def _row(pages: tuple[int, ...], page_size: int, length: int, device: str) -> torch.Tensor:
    slots = [p * page_size + o for p in pages for o in range(page_size)][:length]
    return torch.tensor(slots, dtype=torch.int32, device=device)


class _Side:
    """One engine's row (full slots and, for a hybrid SWA pool, SWA slots) and its buffers' items."""

    def __init__(self, case: ChecksumCase, name: str, device: str) -> None:
        ps, n = case.page_size, case.length
        self.other = OTHER[name]
        self.full: tuple[int, ...] = getattr(case, f"{name}_pages")
        self.swa: tuple[int, ...] = getattr(case, f"{name}_swa_pages")
        self.row = _row(self.full, ps, n, device)
        self.swa_row = _row(self.swa, ps, n, device) if case.sliding_window else self.row
        self.slot = torch.tensor([getattr(case, f"{name}_mamba_slot")], dtype=torch.int64, device=device)
        self.req_row = torch.tensor([getattr(case, f"{name}_row")], dtype=torch.int64, device=device)
        self.kv: dict[int, bytes] = {}
        self.states: dict[str, dict[int, bytes]] = {kind: {} for kind in case.state_types}

    def key(self, kind: str, logical: int) -> int:
        """The item of ``kind`` that holds a logical page: its full page, or its SWA page for SWA-indexed state."""
        return self.swa[logical] if kind in ("swa", "block_scale_swa") else self.full[logical]

    def hold(self, logical: int) -> None:
        """This side's items of a logical page hold its bytes (as prefill computed them)."""
        self.kv[self.key("kv", logical)] = bytes([logical % 251 + 1]) * PAGE_BYTES
        for j, (kind, buffer) in enumerate(self.states.items()):
            if kind not in ("mamba", "dsa_tail", "qsa_pending"):  # the request's state, not a page's
                buffer[self.key(kind, logical)] = bytes([(logical + 60 * (j + 1)) % 251 + 1]) * 2

    def hold_state(self) -> None:
        """This side's Mamba slot (and a QSA indexer's pending ring, in its request row) holds the request's state
        after its last token (as prefill computed it)."""
        if "mamba" in self.states:
            self.states["mamba"][int(self.slot[0])] = b"\x77" * 4
        if "qsa_pending" in self.states:
            self.states["qsa_pending"][int(self.req_row[0])] = b"\x78" * 4

    def window(self, case: ChecksumCase, seq_len: int, start: int) -> torch.Tensor:
        """The SWA pages of the window ``[max(start, seq_len - window), seq_len)``, page-aligned down."""
        ps = case.page_size
        first = max(start, seq_len - case.sliding_window) // ps * ps
        return page_indices_for_request(self.swa_row, seq_len, ps, start=first)

    def payloads(self, case: ChecksumCase) -> dict[str, torch.Tensor | None]:
        """Each state type's items of this side's transfer payload (prefill sends them, decode lands them there):
        ``BLOCK_SCALE`` its full pages of ``[0, n)`` (``_full_kv_pages_payload``), ``SWA`` and ``BLOCK_SCALE_SWA``
        its SWA pages of the window past ``D`` (``_swa_payload``), ``DSA`` its pages past ``D``
        (``_dsa_pages_payload``), ``MAMBA`` its slot (``_mamba_payload``), ``QSA_PENDING`` its request row
        (``_qsa_pending_payload``), ``QSA_COMPRESSED`` and ``MINIMAX_DENSE_KV`` its full pages of ``[0, n)``,
        ``MINIMAX_INDEX_K`` its pages past ``D`` (``minimax_index_transfer_pages``)."""
        window = self.window(case, case.length, case.decode_prefix) if case.sliding_window else None
        full = page_indices_for_request(self.row, case.length, case.page_size)
        suffix = page_indices_for_request(self.row, case.length, case.page_size, start=case.decode_prefix)
        return {"swa": window, "block_scale": full, "block_scale_swa": window, "dsa": suffix, "mamba": self.slot,
                "dsa_tail": None, "qsa_pending": self.req_row, "qsa_compressed": full, "minimax_index_k": suffix,
                "minimax_dense_kv": full}  # fmt: skip

    def digest(
        self, case: ChecksumCase, seq_len: int
    ) -> tuple[int, tuple[int, ...], tuple[tuple[str, tuple[int, ...]], ...]]:
        """This side's ``compute`` over its row's ``[D, seq_len)`` and its state there (raises as ``compute`` does)."""
        start = digest_start(case.decode_prefix)
        pages = page_indices_for_request(self.row, seq_len, case.page_size, start=start)
        window = self.window(case, seq_len, start) if case.sliding_window else pages[:0]
        indices = state_indices(case, pages, window, self.slot, self.req_row)
        return digest(self.kv, pages, self.states, indices, self.other)


def kv_checksum(case: ChecksumCase, device: str) -> ChecksumTrace:
    ps, n, d = case.page_size, case.length, case.decode_prefix
    pre, dec = _Side(case, "prefill", device), _Side(case, "decode", device)
    for i in range(len(case.prefill_pages)):  # prefill computed every page
        pre.hold(i)
    pre.hold_state()
    for i in range(d // ps):  # decode's tree holds the prefix: the same bytes, computed there
        dec.hold(i)

    # prefill: each chunk sends its whole pages past what was sent, the last one the rest with the state payloads;
    # the last digests [D, n)
    sent_list: list[int] = []
    start = d
    for k, end in enumerate(case.chunk_ends):
        last = k == len(case.chunk_ends) - 1
        stop = chunk_stop(end, ps, last)
        if stop > start or last:
            sent_list += page_indices_for_request(pre.row, stop, ps, start=start).cpu().tolist()
            start = max(start, stop)
    sent = tuple(int(p) for p in sent_list)
    payload = pre.payloads(case)
    sent_state = tuple((k, tuple(_listed(payload[k]))) for k in case.state_types)
    try:
        expected, prefill_read, prefill_state = pre.digest(case, n)
    except AssertionError as exc:
        return ChecksumTrace((), sent, (), (), False, sent_state=sent_state, raised=f"prefill: AssertionError: {exc}")
    dst = tuple(int(p) for p in page_indices_for_request(dec.row, n, ps, start=d).cpu().tolist())
    for src, to in zip(sent, dst, strict=True):  # the transfer: whole pages
        dec.kv[to] = pre.kv[src]
    landing = dec.payloads(case)
    for kind, items in sent_state:  # each state payload onto decode's destinations for it
        for src, to in zip(items, _listed(landing[kind]), strict=True):
            dec.states[kind][to] = pre.states[kind][src]

    committed, why = metadata_handoff(case)
    if not committed:
        return ChecksumTrace(prefill_read, sent, dst, (), False, why, prefill_state, sent_state=sent_state,
                             committed=False)  # fmt: skip
    # decode: the committed row is prompt + outputs but the handoff token; a rebootstrap's boundary token is replayed
    # as the handoff, so its kept outputs are all committed
    try:
        got, decode_read, decode_state = dec.digest(case, verified_length(case.prompt, case.outputs + 1))
    except AssertionError as exc:
        return ChecksumTrace(prefill_read, sent, dst, (), False, prefill_state_digest=prefill_state,
                             sent_state=sent_state, raised=f"decode: AssertionError: {exc}")  # fmt: skip
    message = "" if got == expected else f"KV checksum mismatch: decode {got:#x}, prefill {expected:#x}"
    return ChecksumTrace(prefill_read, sent, dst, decode_read, got == expected, message, prefill_state, decode_state,
                         sent_state)  # fmt: skip


def _listed(pages: torch.Tensor | None) -> list[int]:
    return [] if pages is None else [int(p) for p in pages.cpu().tolist()]
