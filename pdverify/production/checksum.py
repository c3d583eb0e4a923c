"""The PD KV checksum end to end, ported from SGLang 0.5.23 with F3's fix (``findings/F3/fix.patch``):
``send_kv_chunk``'s digest on prefill, the page-granular transfer, ``_verify_kv_checksums`` on decode.

Each side digests ``page_indices_for_request(row, end, start=D)`` - its row's tokens ``[D, end)`` strided to page
ids - over its registered KV buffer, one item per page. Prefill's end is the tokens it computed; decode's is the
row ``prepare_for_prebuilt`` committed: the prompt plus the outputs but the last (the handoff token, whose KV is not
written yet), which for a rebootstrap is the prompt plus the outputs it kept. The buffers are host bytes standing
for the device KV (a page's bytes: its id, repeated), so a digest of the wrong pages differs from prefill's.
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


def digest(buffer: dict[int, bytes], pages: torch.Tensor) -> tuple[int, tuple[int, ...]]:
    """Adler-32 over the buffer's items at ``pages`` (1 over none, as the kernel), and the pages read."""
    read = tuple(int(p) for p in pages.cpu().tolist())
    return (zlib.adler32(b"".join(buffer[p] for p in read)) if read else 1), read


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
    # the prefill engine's KV: each page's bytes name the logical page they hold (equal content on both sides)
    prefill_kv = {p: bytes([i % 251 + 1]) * PAGE_BYTES for i, p in enumerate(case.prefill_pages)}
    decode_kv = {p: bytes(PAGE_BYTES) for p in case.decode_pages}  # decode's pages before the transfer
    for i in range(d // ps):  # decode's tree holds the prefix: the same KV, computed there
        decode_kv[case.decode_pages[i]] = prefill_kv[case.prefill_pages[i]]

    # prefill: each chunk sends its whole pages past what was sent, the last one the rest; the last digests [D, n)
    sent_list: list[int] = []
    start = d
    for k, end in enumerate(case.chunk_ends):
        last = k == len(case.chunk_ends) - 1
        stop = chunk_stop(end, ps, last)
        if stop > start or last:
            sent_list += page_indices_for_request(prefill_row, stop, ps, start=start).cpu().tolist()
            start = max(start, stop)
    expected, prefill_read = digest(prefill_kv, page_indices_for_request(prefill_row, n, ps, start=digest_start(d)))
    destinations = page_indices_for_request(decode_row, n, ps, start=d)
    sent = tuple(int(p) for p in sent_list)
    dst = tuple(int(p) for p in destinations.cpu().tolist())
    for src, to in zip(sent, dst, strict=True):  # the transfer: whole pages
        decode_kv[to] = prefill_kv[src]

    # decode: the committed row is prompt + outputs but the handoff token; a rebootstrap's boundary token is replayed
    # as the handoff, so its kept outputs are all committed
    seq_len = verified_length(case.prompt, case.outputs + 1)
    got, decode_read = digest(decode_kv, page_indices_for_request(decode_row, seq_len, ps, start=digest_start(d)))
    message = "" if got == expected else f"KV checksum mismatch: decode {got:#x}, prefill {expected:#x}"
    return ChecksumTrace(prefill_read, sent, dst, decode_read, got == expected, message)
