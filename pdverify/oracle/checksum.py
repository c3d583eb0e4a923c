"""Oracle of the PD KV checksum end to end: plain Python over the case's page lists, no shared helper.

Both digests cover what is transferred and nothing else: the logical pages of ``[D, n)`` (``D`` page-aligned, so the
first is page ``D // page_size``; the last is the partial page holding token ``n - 1``), on prefill's row what
prefill sends, on decode's row where it lands - and each registered state item as it is sent: a hybrid SWA pool's
SWA KV by each side's SWA pages over the window ``[max(D, n - window), n)`` (page-aligned down), block scales
(``mxfp8``) with the pages they scale (full pages over ``[D, n)``, SWA pages over the window), a DSA pool's index
keys with the KV pages past ``D``, a hybrid linear model's Mamba state by each side's slot, a QSA indexer's pending ring
by each side's request row and its compressed keys with the KV pages past ``D``, a MiniMax sparse pool's indexer
keys and dense layers' KV with the KV pages past ``D``; a compressed indexer's
tail (sent as ring slots within the request's row, not as items) by none. A page-granular transfer (and the slot's
copy) copies every byte the two digests read, so decode accepts the request.
"""

from __future__ import annotations

from pdverify.model.checksum import ChecksumCase


def logical_pages(case: ChecksumCase) -> list[int]:
    """The logical pages of ``[D, n)``."""
    first = case.decode_prefix // case.page_size
    last = (case.prompt + case.outputs - 1) // case.page_size
    return list(range(first, last + 1))


def prefill_digest(case: ChecksumCase) -> list[int]:
    """The pages of prefill's row that it sends and digests."""
    return [case.prefill_pages[i] for i in logical_pages(case)]


def decode_digest(case: ChecksumCase) -> list[int]:
    """The pages of decode's row the transfer lands on and decode digests."""
    return [case.decode_pages[i] for i in logical_pages(case)]


def window_pages(case: ChecksumCase) -> list[int]:
    """The logical pages of the sliding window prefill sends: ``[max(D, n - window), n)``, page-aligned down."""
    n = case.prompt + case.outputs
    start = max(case.decode_prefix, n - case.sliding_window)
    return list(range(start // case.page_size, (n - 1) // case.page_size + 1))


def _state(
    case: ChecksumCase, full: tuple[int, ...], swa: tuple[int, ...], slot: int, row: int
) -> list[tuple[str, list[int]]]:
    """Each registered state type with the items a side digests of it: its own payload's index space and range."""
    out: list[tuple[str, list[int]]] = []
    if case.kv_pool in ("mamba", "mamba_dsa", "mamba_qsa"):
        out.append(("mamba", [slot]))
    if case.kv_pool == "mamba_qsa":
        out.append(("qsa_pending", [row]))
        out.append(("qsa_compressed", [full[i] for i in logical_pages(case)]))
    if case.kv_pool in ("dsa", "mamba_dsa"):
        out.append(("dsa", [full[i] for i in logical_pages(case)]))
        if case.dsa_index_kpool > 1:  # sent as ring slots within the row, never as items: not digested
            out.append(("dsa_tail", []))
    if case.kv_pool == "minimax":
        out.append(("minimax_index_k", [full[i] for i in logical_pages(case)]))
        out.append(("minimax_dense_kv", [full[i] for i in logical_pages(case)]))
    if case.sliding_window:
        out.append(("swa", [swa[i] for i in window_pages(case)]))
    if case.kv_cache_dtype == "mxfp8":
        out.append(("block_scale", [full[i] for i in logical_pages(case)]))
        if case.sliding_window:
            out.append(("block_scale_swa", [swa[i] for i in window_pages(case)]))
    return out


def prefill_state_digest(case: ChecksumCase) -> list[tuple[str, list[int]]]:
    """The state items prefill digests, per registered state type (none when the pool registers no state)."""
    return _state(case, case.prefill_pages, case.prefill_swa_pages, case.prefill_mamba_slot, case.prefill_row)


def decode_state_digest(case: ChecksumCase) -> list[tuple[str, list[int]]]:
    """The state items decode digests, per registered state type, on its own pages."""
    return _state(case, case.decode_pages, case.decode_swa_pages, case.decode_mamba_slot, case.decode_row)
