"""The PD KV checksum end to end, ported from SGLang 0.5.23 with F3's and F4's fixes (``findings/F3/fix.patch``,
``findings/F4/fix.patch``): ``send_kv_chunk``'s digest on prefill, the page-granular transfer,
``_verify_kv_checksums`` on decode.

Each side digests ``page_indices_for_request(row, end, start=D)`` - its row's tokens ``[D, end)`` strided to page
ids - over its registered KV buffer, one item per page. Prefill's end is the tokens it computed; decode's is the
row ``prepare_for_prebuilt`` committed: the prompt plus the outputs but the last (the handoff token, whose KV is not
written yet), which for a rebootstrap is the prompt plus the outputs it kept. The buffers are host bytes standing
for the device KV (a page's bytes: its id, repeated), so a digest of the wrong pages differs from prefill's. An
``mxfp8`` pool also registers its block scales as state, one item per KV page: ``compute`` refuses to digest without
state indices, and F4's fix gives the KV page ids (the scales are sent with them, ``_full_kv_pages_payload``).
"""

from __future__ import annotations

import zlib

import torch

from pdverify.model.checksum import ChecksumCase, ChecksumTrace

PAGE_BYTES = 16
"""Bytes of one page item of the stand-in KV buffer."""


def page_indices_for_request(row: torch.Tensor, end: int, page_size: int, start: int = 0) -> torch.Tensor:
    """The page ids of the row's tokens ``[start, end)``: ``row[start:end][::page_size] // page_size``, int64 on the
    row's device (``start`` page-aligned)."""
    idx = row[start:end].to(torch.int64)
    return idx if page_size == 1 else idx[::page_size] // page_size


def state_indices(block_scales: bool, kv_pages: torch.Tensor) -> torch.Tensor | None:
    """The state indices a side digests: for block scales, the KV page ids (F4's fix; 0.5.21-0.5.23 give None);
    None for a pool that registers no state."""
    return kv_pages if block_scales else None


def digest(
    kv: dict[int, bytes], pages: torch.Tensor, scales: dict[int, bytes] | None, state: torch.Tensor | None
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``KvChecksumComputer.compute``: Adler-32 over the KV items at ``pages`` then the state items at ``state`` (1
    over none, as the kernel), with the KV and state items read. Refuses registered state without indices."""
    if scales is not None and state is None:
        raise AssertionError("state buffers are registered but compute() was given no state indices")
    read = tuple(int(p) for p in pages.cpu().tolist())
    parts = [kv[p] for p in read]
    state_read: tuple[int, ...] = ()
    if scales is not None and state is not None:
        state_read = tuple(int(p) for p in state.cpu().tolist())
        parts += [scales[p] for p in state_read]
    return (zlib.adler32(b"".join(parts)) if parts else 1), read, state_read


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


def _row(pages: tuple[int, ...], page_size: int, length: int, device: str) -> torch.Tensor:
    slots = [p * page_size + o for p in pages for o in range(page_size)][:length]
    return torch.tensor(slots, dtype=torch.int32, device=device)


def kv_checksum(case: ChecksumCase, device: str) -> ChecksumTrace:
    ps, n, d = case.page_size, case.length, case.decode_prefix
    prefill_row = _row(case.prefill_pages, ps, n, device)
    decode_row = _row(case.decode_pages, ps, n, device)
    # the prefill engine's KV (and block scales): each page's bytes name the logical page they hold
    prefill_kv = {p: bytes([i % 251 + 1]) * PAGE_BYTES for i, p in enumerate(case.prefill_pages)}
    decode_kv = {p: bytes(PAGE_BYTES) for p in case.decode_pages}  # decode's pages before the transfer
    prefill_sc, decode_sc = None, None
    if case.block_scales:  # the block scales: one item per page, their own bytes
        prefill_sc = {p: bytes([255 - i % 251]) * 2 for i, p in enumerate(case.prefill_pages)}
        decode_sc = {p: bytes(2) for p in case.decode_pages}
    for i in range(d // ps):  # decode's tree holds the prefix: the same KV, computed there
        decode_kv[case.decode_pages[i]] = prefill_kv[case.prefill_pages[i]]
        if prefill_sc is not None and decode_sc is not None:
            decode_sc[case.decode_pages[i]] = prefill_sc[case.prefill_pages[i]]

    # prefill: each chunk sends its whole pages past what was sent, the last one the rest (with the block scales of
    # every page of [0, n)); the last digests [D, n)
    sent_list: list[int] = []
    start = d
    for k, end in enumerate(case.chunk_ends):
        last = k == len(case.chunk_ends) - 1
        stop = chunk_stop(end, ps, last)
        if stop > start or last:
            sent_list += page_indices_for_request(prefill_row, stop, ps, start=start).cpu().tolist()
            start = max(start, stop)
    sent = tuple(int(p) for p in sent_list)
    sent_state = tuple(page_indices_for_request(prefill_row, n, ps).cpu().tolist()) if case.block_scales else ()
    mine = page_indices_for_request(prefill_row, n, ps, start=digest_start(d))
    try:
        expected, prefill_read, prefill_state = digest(
            prefill_kv, mine, prefill_sc, state_indices(case.block_scales, mine)
        )
    except AssertionError as exc:
        return ChecksumTrace((), sent, (), (), False, sent_state=sent_state, raised=f"prefill: AssertionError: {exc}")
    destinations = page_indices_for_request(decode_row, n, ps, start=d)
    dst = tuple(int(p) for p in destinations.cpu().tolist())
    for src, to in zip(sent, dst, strict=True):  # the transfer: whole pages
        decode_kv[to] = prefill_kv[src]
    if prefill_sc is not None and decode_sc is not None:  # decode's block-scale destinations: its pages of [0, n)
        for src, to in zip(sent_state, page_indices_for_request(decode_row, n, ps).cpu().tolist(), strict=True):
            decode_sc[int(to)] = prefill_sc[src]

    # decode: the committed row is prompt + outputs but the handoff token; a rebootstrap's boundary token is replayed
    # as the handoff, so its kept outputs are all committed
    seq_len = verified_length(case.prompt, case.outputs + 1)
    theirs = page_indices_for_request(decode_row, seq_len, ps, start=digest_start(d))
    try:
        got, decode_read, decode_state = digest(decode_kv, theirs, decode_sc, state_indices(case.block_scales, theirs))
    except AssertionError as exc:
        return ChecksumTrace(prefill_read, sent, dst, (), False, prefill_state_digest=prefill_state,
                             sent_state=sent_state, raised=f"decode: AssertionError: {exc}")  # fmt: skip
    message = "" if got == expected else f"KV checksum mismatch: decode {got:#x}, prefill {expected:#x}"
    return ChecksumTrace(prefill_read, sent, dst, decode_read, got == expected, message, prefill_state, decode_state,
                         sent_state)  # fmt: skip
