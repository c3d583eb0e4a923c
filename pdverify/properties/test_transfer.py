"""Properties P9-P14: prefill's chunk sends and decode's destination list pair up page by page."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from pdverify.model.layout import PagedRow, build_req_to_token
from pdverify.oracle import transfer as oracle
from pdverify.production.transfer import KvChunk, PrefillSendState, from_wire, to_wire
from pdverify.properties.compare import assert_host_indices
from pdverify.properties.registry import examples, note_event, prop, within_release
from pdverify.properties.releases import DOMAIN
from pdverify.strategies import PDPair, pd_pairs
from pdverify.targets import Target

NEEDS = ("send_kv_chunk", "decode_page_indices", "kv_to_page_num")


@dataclass
class Exchange:
    """One request's transfer as the target performs it."""

    num_pages: int
    sends: list[tuple[int, KvChunk]]
    """(index of the chunk in the schedule, the send)."""
    states: list[PrefillSendState]
    decode: np.ndarray
    prefill_locs: list[int]
    decode_locs: list[int]


def run_exchange(target: Target, pair: PDPair, device: str) -> Exchange:
    """Prefill sends ``pair``'s chunks through the target; decode builds its destination list."""
    within_release(pair)  # an explicit example with a later release's input is outside an earlier one's domain
    ps, d, n = pair.page_size, pair.prefix_len, pair.length
    width = n + ps
    prefill_table = build_req_to_token([[], pair.prefill.locations], width, dtype=pair.dtype, device=device)
    decode_table = build_req_to_token([pair.decode.locations], width, dtype=pair.dtype, device=device)
    num_pages = target.require("kv_to_page_num")(n - d, ps)
    state = PrefillSendState(1, n, d, num_pages, d)
    send = target.require("send_kv_chunk")
    states, sends = [state], []
    for k, end in enumerate(pair.chunk_ends):
        chunk, state = send(
            prefill_table, state, extend_end=end, last_chunk=k == len(pair.chunk_ends) - 1, page_size=ps
        )
        states.append(state)
        if chunk is not None:
            sends.append((k, chunk))
    decode = target.require("decode_page_indices")(decode_table, 0, d, n, ps)
    return Exchange(num_pages, sends, states, decode, pair.prefill.locations, pair.decode.locations)


def _events(pair: PDPair) -> None:
    if pair.prefix_len == pair.length:
        note_event("full prefix hit (D == L)")
    elif pair.prefix_len:
        note_event("decode prefix D > 0")
    if pair.length % pair.page_size:
        note_event("last page partial")
    note_event(f"chunks: {min(len(pair.chunk_ends), 4)}{'+' if len(pair.chunk_ends) > 4 else ''}")


def _pair(pages_p: tuple[int, ...], pages_d: tuple[int, ...], n: int, ps: int, d: int, ends: list[int]) -> PDPair:
    return PDPair(PagedRow(pages_p, n, ps, d), PagedRow(pages_d, n, ps, d), ends)


EXAMPLES = [
    _pair((5, 2, 9), (7, 1, 3), 10, 4, 4, [6, 10]),
    _pair((5, 2, 9), (7, 1, 3), 10, 4, 0, [3, 8, 10]),
    _pair((5, 2), (7, 1), 8, 4, 8, [8]),  # D == L: zero pages, still sent
    _pair((4,), (6,), 1, 1, 0, [1]),  # the shortest prompt SGLang accepts
    _pair((4, 8, 6), (1, 2, 3), 3, 1, 1, [1, 2, 3]),
    _pair((5, 2, 9), (7, 1, 3), 10, 4, 8, [3, 9, 10]),  # a chunk ending before D is skipped
    _pair((5, 2), (7, 1), 8, 4, 0, [7, 8]),  # the non-last chunk defers its partial page
]


@examples("pair", EXAMPLES)
@prop("P9", "sender page count == len(decode list) == ceil((L - D) / ps)", needs=NEEDS, pair=pd_pairs())
def test_p9_count(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    ex = run_exchange(target, pair, device)
    expected = len(oracle.decode_pages(ex.decode_locs, pair.prefix_len, pair.length, pair.page_size))
    assert ex.num_pages == expected, f"sender initialised with {ex.num_pages} pages, decode has {expected}"
    assert len(ex.decode) == expected, f"decode registers {len(ex.decode)} pages, expected {expected}"


@examples("pair", EXAMPLES)
@prop(
    "P10",
    "prefill's sends, concatenated, are the pages of [D, L); each as the contract says; only the final one is last",
    needs=NEEDS,
    pair=pd_pairs(),
)
def test_p10_concatenation(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    check_concatenation(run_exchange(target, pair, device), pair)


def check_concatenation(ex: Exchange, pair: PDPair) -> None:
    """P10's assertions on one exchange (``pdverify.findings`` holds a known defect's model to them too)."""
    expected = oracle.prefill_sends(ex.prefill_locs, pair.prefix_len, pair.length, pair.page_size, pair.chunk_ends)
    got = [(c.start, c.end, c.pages.tolist(), c.dst_offset, c.is_last) for _, c in ex.sends]
    want = [(s.start, s.end, s.pages, s.dst_offset, s.is_last) for s in expected]
    assert got == want, f"sends (start, end, pages, dst_offset, is_last):\n  got  {got}\n  want {want}"
    joined = [p for _, c in ex.sends for p in c.pages.tolist()]
    assert joined == oracle.decode_pages(ex.prefill_locs, pair.prefix_len, pair.length, pair.page_size)
    assert [c.is_last for _, c in ex.sends].count(True) == 1 and ex.sends[-1][1].is_last


@examples("pair", EXAMPLES)
@prop(
    "P11",
    "the i-th prefill page and the i-th decode page hold the same logical page D/ps + i; sends land in order",
    needs=NEEDS,
    pair=pd_pairs(),
)
def test_p11_positional_pairing(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    check_pairing(run_exchange(target, pair, device), pair)


def check_pairing(ex: Exchange, pair: PDPair) -> None:
    """P11's assertions on one exchange."""
    ps, first = pair.page_size, pair.prefix_len // pair.page_size
    logical_p = {loc // ps: i // ps for i, loc in enumerate(ex.prefill_locs)}
    logical_d = {loc // ps: i // ps for i, loc in enumerate(ex.decode_locs)}
    dst = ex.decode.tolist()
    filled: list[int | None] = [None] * len(dst)
    placed = 0
    for k, chunk in ex.sends:
        assert chunk.dst_offset == placed, f"chunk {k} lands at {chunk.dst_offset}, expected {placed}"
        window = dst[chunk.dst_offset : chunk.dst_offset + len(chunk.pages)]
        assert len(window) == len(chunk.pages), f"chunk {k} overruns the destination list (truncated)"
        for src_page, dst_page in zip(chunk.pages.tolist(), window, strict=True):
            assert logical_p[src_page] == logical_d[dst_page], (
                f"prefill page {src_page} (logical {logical_p[src_page]}) paired with decode page "
                f"{dst_page} (logical {logical_d[dst_page]})"
            )
        for i in range(len(window)):
            filled[chunk.dst_offset + i] = dst[chunk.dst_offset + i]
        placed += len(chunk.pages)
    assert filled == dst, "some destination pages were never sent"
    assert [logical_d[p] for p in dst] == list(range(first, first + len(dst)))


@examples("pair", EXAMPLES)
@prop(
    "P12",
    "non-last sends end on a page boundary; start_send_idx starts at D, stays aligned, never decreases, ends at L",
    needs=NEEDS,
    pair=pd_pairs(),
)
def test_p12_chunk_boundaries(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    check_boundaries(run_exchange(target, pair, device), pair)


def check_boundaries(ex: Exchange, pair: PDPair) -> None:
    """P12's assertions on one exchange."""
    ps = pair.page_size
    starts = [s.start_send_idx for s in ex.states]
    assert starts[0] == pair.prefix_len
    assert all(a <= b for a, b in itertools.pairwise(starts)), f"start_send_idx moved backwards: {starts}"
    assert all(s % ps == 0 for s in starts[:-1]), f"start_send_idx not page-aligned before the last chunk: {starts}"
    assert starts[-1] == pair.length, f"final start_send_idx {starts[-1]} != L={pair.length}"
    last_k = len(pair.chunk_ends) - 1
    for k, chunk in ex.sends:
        assert chunk.start % ps == 0, f"chunk {k} starts mid-page at {chunk.start}"
        if k != last_k:
            assert chunk.end % ps == 0, f"non-last chunk {k} ends mid-page at {chunk.end}"
            assert len(chunk.pages) > 0, f"non-last chunk {k} sent with zero pages"


@examples("pair", EXAMPLES)
@prop(
    "P13",
    "the last chunk is always sent, flagged last, also with zero pages (decode full-prefix hit)",
    needs=NEEDS,
    pair=pd_pairs(),
)
def test_p13_last_chunk_sent(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    ex = run_exchange(target, pair, device)
    assert ex.sends, "nothing was sent: decode would wait for ever"
    k, last = ex.sends[-1]
    assert k == len(pair.chunk_ends) - 1, "the last chunk was not sent"
    assert last.is_last, "the last send is not flagged last"
    if len(last.pages) == 0:
        note_event("zero-page last chunk")


@examples("pair", EXAMPLES)
@prop(
    "P14",
    "decode's list has the wire's dtype whatever the table's (int32; int64 before #7214) and survives the wire; "
    "prefill's lists keep the table's dtype (int32, or int64 once translated)",
    needs=NEEDS,
    pair=pd_pairs(),
)
def test_p14_wire(target: Target, device: str, pair: PDPair) -> None:
    _events(pair)
    ex = run_exchange(target, pair, device)
    expected = oracle.decode_pages(ex.decode_locs, pair.prefix_len, pair.length, pair.page_size)
    wire = np.dtype(DOMAIN.wire_page_dtype)  # what the release's receiver parses (from_zmq)
    assert_host_indices("decode_page_indices", ex.decode, expected, wire)
    assert np.frombuffer(to_wire(ex.decode), dtype=wire).tolist() == expected, "decode's list does not survive the wire"
    table = np.dtype(np.int64) if pair.dtype == torch.int64 else np.dtype(np.int32)
    for _, chunk in ex.sends:
        assert chunk.pages.dtype == table, f"prefill list has dtype {chunk.pages.dtype} on an {table} table"
        if table == np.int32:  # prefill's own lists never go through from_zmq; an int32 one would survive it
            assert from_wire(to_wire(chunk.pages)).tolist() == chunk.pages.tolist()
