"""Scheduler-level properties of one request's prefill transfer, on the
``prefill_exchange`` unit (SGLang's own ``finalize_bootstrap``, early send, ``send_kv_chunk`` and
``CommonKVSender`` on the ``sglang`` target), and of the metadata wire (``wire_roundtrip``).

S9-S14 extend P9-P14 to what the scheduler really does (DCP segments, the staging grid, the early send, the
translated int64 indices, aux and state routed by the sender's own counter). P15-P18 check the state lists of
the final send against the positions decode registers for them: the SWA window from ``max(D, L - W)``, the DSA
and MiniMax index-K suffix from ``D``, the full lists from 0, the ring and the request row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import example
from hypothesis import strategies as st

from pdverify.model.exchange import PrefillCase, PrefillTrace, Transfer, WireMessage
from pdverify.model.layout import PagedRow, build_req_to_token
from pdverify.oracle import prefill_exchange as oracle
from pdverify.properties.registry import Clause, applies, note_event, prop, within_domain, within_release
from pdverify.properties.releases import (
    DOMAIN,
    FROM_ATTENTION_CP,
    FROM_BLOCK_SCALE_STATE,
    FROM_EARLY_SEND,
    FROM_KV_CHECKSUM,
    FROM_MOONCAKE_DECODE_PREFIX,
    FROM_STAGING_GRID,
    FROM_STATE_LISTS,
    FROM_STATE_PAYLOADS,
)
from pdverify.strategies import PDPair, pd_pairs, prefill_cases, rank_splits, state_lists
from pdverify.targets import Target

NEEDS = ("prefill_exchange",)
SPEC_PAGES = (5, 6, 2, 9, 3, 8)


def _spec_case(**kw: Any) -> PrefillCase:
    """The prefill worked example: ps 4, L 23, D 4, pages 5 6 2 9 3 8."""
    row = tuple(SPEC_PAGES[i // 4] * 4 + i % 4 for i in range(23))
    base: dict[str, Any] = {"page_size": 4, "length": 23, "decode_prefix": 4, "row": row, "chunk_ends": (10, 19, 23)}
    return PrefillCase(**{**base, **kw})


EXAMPLES = [
    _spec_case(state_types=("SWA", "DSA", "MINIMAX_INDEX_K", "MINIMAX_DENSE_KV"), window=6),
    _spec_case(chunk_ends=(17, 23), dcp_max_tokens=8),
    _spec_case(chunk_ends=(18, 23), chunked_prefill_size=8),
    # translated through a page table whose physical ids lie past int32 (5 -> 2**29 + 5, ...)
    _spec_case(
        chunk_ends=(23,),
        early_prefix=12,
        translation=(0, 0, 2**29 + 2, 2**29 + 3, 0, 2**29 + 5, 2**29 + 6, 0, 2**29 + 8, 2**29 + 9),
    ),
    _spec_case(chunk_ends=(23,), early_prefix=13),
    _spec_case(chunk_ends=(22, 23), chunked_prefill_size=8, early_prefix=20),
    _spec_case(chunk_ends=(10, 23), early_prefix=12, overlap=True),
    # an SWA ring whose window (positions 17..22) wraps round the ring (size 6): rows 5, 0, 1, 2, 3, 4
    _spec_case(state_types=("SWA_RING",), window=6, ring_size=6),
    # overlap, and a staging grid (16) that leaves the early send nothing to ship: the next transfer waits
    _spec_case(chunk_ends=(23,), chunked_prefill_size=16, early_prefix=12, overlap=True),
    PrefillCase(4, 20, 20, tuple(SPEC_PAGES[i // 4] * 4 + i % 4 for i in range(20)), (20,), state_types=("DSA",)),
    # an SWA window whose raw start (L - W = 19) is mid-page: floored to 16 it spans two pages
    PrefillCase(
        4, 22, 4, tuple(SPEC_PAGES[i // 4] * 4 + i % 4 for i in range(22)), (22,), state_types=("SWA",), window=3
    ),
    # the KV checksum over a DCP-packed, early-sent request; over translated pages; a health-check request
    _spec_case(dcp_max_tokens=8, early_prefix=12, kv_checksum=True),
    _spec_case(chunk_ends=(23,), kv_checksum=True, translation=(0, 0, 12, 13, 0, 15, 16, 0, 18, 19)),
    _spec_case(kv_checksum=True, health_check=True),
]


def _wire_pair() -> PDPair:
    """The decode worked example: pages 5 2 9 (ps 4, L 10, D 0)."""
    return PDPair(PagedRow((7, 1, 3), 10, 4, 0), PagedRow((5, 2, 9), 10, 4, 0), [10])


def examples_of(fn: Any) -> Any:
    for case in EXAMPLES:
        fn = example(case=case)(fn)
    return fn


def run(target: Target, case: PrefillCase, device: str) -> PrefillTrace:
    mode = "staging" if case.grid else "dcp" if case.dcp_max_tokens else "plain"
    note_event(f"mode: {mode}")
    if case.decode_prefix == case.length:
        note_event("full decode hit (D == L)")
    if case.early_prefix is not None:
        note_event("early cached-prefix send")
    if case.translation is not None:
        note_event("translated (int64) indices")
    within_release(case)
    trace: PrefillTrace = target.require("prefill_exchange")(case, device)
    note_event(f"transfers: {min(len(trace.transfers), 5)}{'+' if len(trace.transfers) > 5 else ''}")
    return trace


def _show(transfers: list[Transfer]) -> str:
    return "; ".join(
        f"{list(t.pages)} -> dst[{t.start}:{t.stop}]{' last' if t.is_last else ''}"
        f"{f' aux={t.aux_index}' if t.aux_index is not None else ''}{' +state' if t.state is not None else ''}"
        for t in transfers
    )


@examples_of
@prop("S9", "the sender is initialised with ceil((L - D) / page_size) pages", needs=NEEDS, case=prefill_cases())
def test_s9_sender_count(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    assert trace.num_pages == oracle.page_count(case), (
        f"sender.init({trace.num_pages}), expected {oracle.page_count(case)}"
    )


@examples_of
@prop(
    "S10",
    "the transfers, concatenated (every chunk, segment and early send), are the pages of [D, L)",
    needs=NEEDS,
    case=prefill_cases(),
)
def test_s10_concatenation(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    sent = [p for t in trace.transfers for p in t.pages]
    assert sent == oracle.main_pages(case), f"sent {sent}, expected {oracle.main_pages(case)}: {_show(trace.transfers)}"


@examples_of
@prop(
    "S11",
    "each transfer lands at dst[curr : curr + n], contiguous from 0 to the sender's page count",
    needs=NEEDS,
    case=prefill_cases(),
)
def test_s11_destination_slices(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    curr = 0
    for t in trace.transfers:
        assert (t.start, t.stop) == (curr, curr + len(t.pages)), (
            f"slice [{t.start}:{t.stop}] after {curr}: {_show(trace.transfers)}"
        )
        curr = t.stop
    assert curr == trace.num_pages, (
        f"slices end at {curr}, the sender holds {trace.num_pages}: {_show(trace.transfers)}"
    )


@examples_of
@prop(
    "S12",
    "non-final sends end on a page boundary (staging: on the grid D + k*grid; DCP: at most the pack limit); "
    "start_send_idx starts at D, never decreases and ends at L; the tokens sent are exactly [D, L)",
    clauses=(
        Clause("range", title="start_send_idx runs from D to L without going back; the tokens sent are [D, L)"),
        Clause("boundaries", title="non-final sends end on a page boundary; DCP: at most the pack limit"),
        Clause("staging_grid", FROM_STAGING_GRID, "staging: non-final sends end on the grid, none longer than it"),
    ),
    needs=NEEDS,
    case=prefill_cases(),
)
def test_s12_boundaries(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    idx = trace.start_send_idx
    counts = [t.num_kv_tokens for t in trace.transfers]
    if applies("range"):
        assert idx[0] == case.decode_prefix, f"start_send_idx starts at {idx[0]}, expected D={case.decode_prefix}"
        assert idx == sorted(idx), f"start_send_idx went back: {idx}"
        assert idx[-1] == case.length, f"start_send_idx ends at {idx[-1]}, expected L={case.length}"
        assert all(c is not None for c in counts), "a transfer without num_kv_tokens"
        assert sum(c or 0 for c in counts) == case.length - case.decode_prefix, f"tokens sent per transfer {counts}"
    # the grid is staging's from #31217 (0.5.17); before, a staged send is placed wherever it ends on a page
    grid = applies("staging_grid")
    allowed = oracle.grid_boundaries(case) if grid else oracle.grid_boundaries(replace(case, chunked_prefill_size=None))
    end = case.decode_prefix
    for t in trace.transfers[:-1]:
        end += t.num_kv_tokens or 0
        if applies("boundaries") or grid:
            assert end in allowed, (
                f"a non-final send ends at token {end}, not on an allowed boundary: {_show(trace.transfers)}"
            )
    limit = case.grid if case.grid is not None and grid else oracle.pack_limit(case) if applies("boundaries") else None
    if limit is not None:
        assert all((c or 0) <= limit for c in counts), f"a send of {max(c or 0 for c in counts)} tokens > {limit}"


@examples_of
@prop(
    "S13",
    "exactly one transfer is flagged last, the final one, and only it carries aux and state "
    "(a zero-page last transfer included); the metadata buffer is set once",
    needs=NEEDS,
    clauses=(
        Clause("last_and_aux", title="one last transfer, the final one, the only one with aux; one metadata set"),
        Clause("state", FROM_STATE_LISTS, "the final transfer, and only it, carries the state lists"),
    ),
    case=prefill_cases(),
)
def test_s13_one_last(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    assert trace.transfers, "nothing was sent: the last chunk must be sent, with zero pages if need be"
    last = [i for i, t in enumerate(trace.transfers) if t.is_last]
    assert last == [len(trace.transfers) - 1], f"last flags at {last}: {_show(trace.transfers)}"
    final = trace.transfers[-1]
    assert final.aux_index == case.aux_index, f"final transfer aux={final.aux_index}, expected {case.aux_index}"
    state = applies("state")  # the last send carries the per-type state lists, empty ones too, from #24932
    assert final.state is not None or not state, "the final transfer carries no state list"
    early = [
        i for i, t in enumerate(trace.transfers[:-1]) if t.aux_index is not None or (state and t.state is not None)
    ]
    assert not early, f"aux or state on a non-final transfer {early}: {_show(trace.transfers)}"
    assert trace.metadata_sets == 1, (
        f"the metadata buffer was set {trace.metadata_sets} times (once, by the last chunk)"
    )


@examples_of
@prop(
    "S15",
    "overlap scheduling: the first transfer after an early send waits on the prior forward's completion event; "
    "no other transfer waits, and none without overlap",
    needs=NEEDS,
    contract=FROM_EARLY_SEND,  # no transfer of a release before the early send has anything to wait on
    case=prefill_cases(),
)
def test_s15_early_send_waits_on_forward(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    waits = [t.waits_on_forward for t in trace.transfers]
    want = oracle.early_send_waits(case)
    note_event(f"overlap: {case.overlap}, waits: {want}")
    assert waits == [want] + [False] * (len(waits) - 1), (
        f"transfers waiting on the forward {waits}, expected only the first to {'' if want else 'not '}wait "
        f"(overlap={case.overlap}, early prefix {case.early_prefix}, D={case.decode_prefix}): {_show(trace.transfers)}"
    )


@examples_of
@prop(
    "S16",
    "with the KV checksum on, the last send sets it once and its digest reads exactly the pages the request sends "
    "for [D, L), as the transfer addresses them (physical ids once translated); a health-check request is set to 0 "
    "undigested; with the checksum off none is set",
    needs=NEEDS,
    contract=FROM_KV_CHECKSUM,  # a release before the checksum has no code that could set one
    case=prefill_cases(),
)
def test_s16_kv_checksum(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    if not case.kv_checksum:
        assert trace.digests == [], f"checksums set with the checksum off: {trace.digests}"
        return
    note_event("KV checksum" + (" (health check)" if case.health_check else ""))
    if case.health_check:
        assert trace.digests == [None], f"a health-check request got digests {trace.digests}, expected one 0"
        return
    want = oracle.main_pages(case)
    sent = [p for t in trace.transfers for p in t.pages]
    assert [list(d) if d is not None else None for d in trace.digests] == [want], (
        f"digests {trace.digests}, expected one over the pages sent for [D, L) = {want} "
        f"(transfers: {_show(trace.transfers)}; sent {sent}; translated: {case.translation is not None})"
    )


SPLIT_EXAMPLES = [
    (_spec_case(dcp_max_tokens=8), ("kv_shard", 2)),
    (_spec_case(early_prefix=12), ("kv_shard", 3)),
    (_spec_case(chunk_ends=(10, 23)), ("cp_all", 3)),
    (_spec_case(chunk_ends=(18, 23), chunked_prefill_size=8), ("cp_all", 4)),
    (_spec_case(), ("cp_rank0", 2)),
    (PrefillCase(4, 8, 8, tuple(SPEC_PAGES[i // 4] * 4 + i % 4 for i in range(8)), (8,)), ("kv_shard", 2)),
]


def _split_examples(fn: Any) -> Any:
    for case, split in SPLIT_EXAMPLES:
        fn = example(case=case, split=split)(fn)
    return fn


@_split_examples
@prop(
    "S17",
    "the prefill ranks sharing a request's transfer send each destination position exactly once between them: a "
    "KV-sharded rank the pages it owns (l % N) as local ids (l // N), an all-CP-ranks rank its contiguous share in "
    "rank order, a dummy CP rank nothing (it reports success at the last chunk); each sending rank flags exactly "
    "its final transfer last",
    needs=NEEDS,
    contract=FROM_ATTENTION_CP,
    case=prefill_cases(),
    split=rank_splits(),
)
def test_s17_ranks_partition_the_transfer(
    target: Target, device: str, case: PrefillCase, split: tuple[str, int]
) -> None:
    mode, size = split
    within_release(replace(case, rank_split=(mode, 0, size)))
    note_event(f"rank split: {mode}")
    full = oracle.main_pages(case)
    owner: dict[int, int] = {}
    spans: list[tuple[int, int]] = []
    for rank in range(size):
        trace = run(target, replace(case, rank_split=(mode, rank, size)), device)
        where = f"rank {rank} of {size} ({mode}): {_show(trace.transfers)}"
        if mode == "cp_rank0" and rank:
            assert not trace.transfers, f"a dummy CP rank sent: {where}"
            assert trace.statuses[-1:] == ["Success"], f"dummy CP rank reported {trace.statuses}, ending in Success"
            continue
        lasts = [k for k, t in enumerate(trace.transfers) if t.is_last]
        assert lasts == [len(trace.transfers) - 1], f"last flags at transfers {lasts}, expected only the final: {where}"
        sent: list[int] = []
        for t in trace.transfers:
            dest = t.destinations
            assert len(dest) == len(t.pages), f"{len(t.pages)} pages for {len(dest)} positions: {where}"
            for pos, page in zip(dest, t.pages, strict=True):
                assert 0 <= pos < len(full) and pos not in owner, (
                    f"position {pos} sent twice or out of [0, {len(full)}) (first by rank {owner.get(pos)}): {where}"
                )
                owner[pos] = rank
                want = full[pos] // size if mode == "kv_shard" else full[pos]
                if mode == "kv_shard":
                    assert full[pos] % size == rank, f"page {full[pos]} belongs to rank {full[pos] % size}: {where}"
                assert page == want, f"position {pos}: sent {page}, expected {want}: {where}"
            sent.extend(dest)
        if mode == "cp_all" and sent:
            assert sent == list(range(sent[0], sent[-1] + 1)), f"rank {rank}'s share is not contiguous: {where}"
            spans.append((sent[0], sent[-1]))
    assert sorted(owner) == list(range(len(full))), (
        f"positions sent {sorted(owner)}, expected every one of [0, {len(full)}) (pages {full})"
    )
    assert spans == sorted(spans), f"CP shares out of rank order: {spans}"


@examples_of
@prop(
    "S14",
    "page lists keep the index dtype: int32 as allocated, int64 once translated to physical ids",
    needs=NEEDS,
    case=prefill_cases(),
)
def test_s14_dtype(target: Target, device: str, case: PrefillCase) -> None:
    trace = run(target, case, device)
    dtypes = {t.dtype for t in trace.transfers}
    assert dtypes <= {case.index_dtype}, f"transfer dtypes {dtypes}, expected {case.index_dtype}"


def _state(target: Target, case: PrefillCase, device: str, kinds: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    trace = run(target, case, device)
    if not case.state_types and not DOMAIN.has("state_lists"):
        return {}  # before the per-type lists (#24932) a request without hybrid state sends no payload at all
    assert trace.transfers and trace.transfers[-1].state is not None, "no state on the final transfer"
    got = trace.transfers[-1].state
    assert len(got) == len(case.state_types), f"{len(got)} state lists for {len(case.state_types)} state types"
    expected = oracle.state_lists(case)
    out = {}
    for kind, have, want in zip(case.state_types, got, expected, strict=True):
        if kind in kinds:
            note_event(f"state {kind}")
            assert list(have) == want, f"{kind} state list {list(have)}, expected {want} (D={case.decode_prefix})"
            out[kind] = have
    return out


@examples_of
@prop(
    "P15",
    "SWA / BLOCK_SCALE_SWA state: the pages of [floor(max(D, L - W) / ps) * ps, L), never before D",
    needs=NEEDS,
    contract=FROM_STATE_PAYLOADS,
    case=prefill_cases(),
)
def test_p15_swa_window(target: Target, device: str, case: PrefillCase) -> None:
    _state(target, case, device, ("SWA", "BLOCK_SCALE_SWA"))
    assert oracle.window_start(case) >= case.decode_prefix


@examples_of
@prop(
    "P16",
    "DSA and MINIMAX_INDEX_K state: the suffix pages of [D, L), positionally paired with decode's",
    needs=NEEDS,
    contract=FROM_STATE_PAYLOADS,
    case=prefill_cases(),
)
def test_p16_suffix_state(target: Target, device: str, case: PrefillCase) -> None:
    _state(target, case, device, ("DSA", "MINIMAX_INDEX_K"))


@examples_of
@prop(
    "P17",
    "QSA_COMPRESSED / MINIMAX_DENSE_KV / BLOCK_SCALE state: every page of [0, L), the prefix included",
    needs=NEEDS,
    contract=FROM_BLOCK_SCALE_STATE,  # the first full-from-0 state type (BLOCK_SCALE); before it P17 has no input
    case=prefill_cases(),
)
def test_p17_full_state(target: Target, device: str, case: PrefillCase) -> None:
    _state(target, case, device, ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"))


@examples_of
@prop(
    "P18",
    "every state list in the pool's order, one per state type (SWA ring rows, request row included)",
    needs=NEEDS,
    contract=FROM_STATE_PAYLOADS,
    case=prefill_cases(),
)
def test_p18_all_state(target: Target, device: str, case: PrefillCase) -> None:
    _state(target, case, device, tuple(case.state_types))


@example(pair=_wire_pair(), state=[[9], []], aux=42)
@prop(
    "W1",
    "decode's page list, aux index, state lists and prefix survive the metadata wire (int32 frames; int64 before "
    "#7214)",
    needs=("decode_page_indices", "wire_roundtrip"),
    clauses=(
        Clause("pages", title="decode's page list and aux index come back as sent, in the wire's dtype"),
        Clause("state_lists", FROM_STATE_LISTS, "the state lists come back as sent, list by list"),
        Clause("decode_prefix", FROM_MOONCAKE_DECODE_PREFIX, "the decode prefix comes back as sent"),
    ),
    pair=pd_pairs(max_length=256),
    state=state_lists(),
    aux=st.integers(0, 2**31 - 1),
)
def test_w1_wire(target: Target, device: str, pair: PDPair, state: list[list[int]], aux: int) -> None:
    within_release(pair)  # an explicit example with a later release's input is outside an earlier one's domain
    width = pair.length + pair.page_size
    table = build_req_to_token([pair.decode.locations], width, dtype=pair.dtype, device=device)
    pages = target.require("decode_page_indices")(table, 0, pair.prefix_len, pair.length, pair.page_size)
    got: WireMessage = target.require("wire_roundtrip")(pages, aux, state, pair.prefix_len)
    if not len(pages):
        note_event("empty page list (full decode hit)")
    sent = [int(p) for p in np.asarray(pages)]
    _check_wire(got, sent, DOMAIN.wire_page_dtype, aux, state, pair.prefix_len)


def _check_wire(got: WireMessage, pages: list[int], dtype: str, aux: int, state: list[list[int]], prefix: int) -> None:
    """W1's and W2's clauses: what the receiver parsed back is what decode sent, in the wire's ``dtype``."""
    if applies("pages"):
        assert not got.is_dummy, "a real destination was read as a dummy rank"
        assert list(got.pages) == pages and got.dtype == dtype, (
            f"pages {pages} ({dtype}) came back as {list(got.pages)} ({got.dtype})"
        )
        assert got.aux_index == aux, f"aux {aux} came back as {got.aux_index}"
    if applies("state_lists"):
        assert [list(s) for s in got.state] == state, f"state {state} came back as {[list(s) for s in got.state]}"
    if applies("decode_prefix"):
        assert got.decode_prefix_len == prefix, f"decode_prefix_len {prefix} came back as {got.decode_prefix_len}"


@example(pages=[5, 2, 9], state=[[9], []], aux=42, prefix=0)
@example(pages=[], state=[], aux=0, prefix=8)  # a full decode hit: no page, the prefix only
@prop(
    "W2",
    "the metadata wire alone: the page list decode sends (int32; int64 before #7214), its aux index, state lists "
    "and prefix, parsed back by prefill's TransferInfo.from_zmq",
    needs=("wire_roundtrip",),
    clauses=(
        Clause("pages", title="the page list and aux index come back as sent, in its dtype, not a dummy rank"),
        Clause("state_lists", FROM_STATE_LISTS, "the state lists come back as sent, list by list"),
        Clause("decode_prefix", FROM_MOONCAKE_DECODE_PREFIX, "the decode prefix comes back as sent"),
    ),
    pages=st.lists(st.integers(0, 2**31 - 1), max_size=64),
    state=state_lists(),
    aux=st.integers(0, 2**31 - 1),
    prefix=st.integers(0, 4096).map(lambda d: d if DOMAIN.decode_prefix else 0),  # read at draw time
)
def test_w2_wire_alone(target: Target, device: str, pages: list[int], state: list[list[int]], aux: int,
                       prefix: int) -> None:  # fmt: skip
    within_domain(DOMAIN.decode_prefix or not prefix, "a decode prefix")
    dtype = DOMAIN.wire_page_dtype  # what the release's decode sends
    got: WireMessage = target.require("wire_roundtrip")(np.array(pages, dtype=dtype), aux, state, prefix)
    _check_wire(got, pages, dtype, aux, state, prefix)
