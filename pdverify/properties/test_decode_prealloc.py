"""Decode pre-allocation (``pop_preallocated``): every destination decode registers is a page the request holds.

D1 walks each page-strided list decode sends to prefill - the main KV list and the SWA, DSA, MiniMax index-K and
full-from-0 state lists - and checks, position by position, that it names the page the request holds for that
logical page on decode: its L1 prefix pages, the pages reserved for a pending HiCache restore, or the pages
pre-allocation gave it. Never page 0 (the padding page) and never an id left in a reused row by an earlier
request: prefill writes KV or state into whatever page the list names.
"""

from __future__ import annotations

from dataclasses import replace

from pdverify.model.exchange import DecodeCase, DecodeTrace, state_list_start
from pdverify.properties.registry import Clause, applies, examples, note_event, prop, within_release
from pdverify.properties.releases import (
    DECODE_PREFIXES,
    FROM_DSV4_REQUEST_STATE,
    FROM_INT32_WIRE,
    FROM_STATE_PAYLOADS,
)
from pdverify.strategies import decode_cases
from pdverify.targets import Target

NEEDS = ("decode_prealloc",)


def _case(l1_pages: list[int], d: int, stale: bool, state: tuple[str, ...]) -> DecodeCase:
    """The worked example of decode pre-allocation: ps 4, L 23, one output, free pages 38 61 11 62 48 33 ..."""
    ps = 4
    l1 = tuple(p * ps + o for p in l1_pages for o in range(ps))
    row = tuple((61 * ps + i % ps) if stale else 0 for i in range(27))
    return DecodeCase(ps, 23, 1, l1, d, row, (38, 61, 11, 62, 48, 33, 50, 7, 45, 8), state_types=state, window=6)


# a hybrid SWA pool at page size 1: no tail pre-allocation, the SWA buffer holds the whole sequence (SWA slots 3, 12,
# 8, ... for [0, 9)); the window [5, 9) names SWA slots 6, 9, 13, 14, not full slots 48, 33, 50, 7
_WHOLE_SWA = DecodeCase(1, 9, 1, (), 0, (0,) * 10, (38, 61, 11, 62, 48, 33, 50, 7, 45, 8), state_types=("SWA",),
                        window=4, swa_free_pages=(3, 12, 8, 5, 6, 9, 13, 14, 15), swa_tail=False)  # fmt: skip

EXAMPLES = [
    _case([], 0, False, ("QSA_COMPRESSED", "DSA", "SWA")),
    # a hybrid SWA pool: SWA pages 3, 12, 8 ... for the tail [20, 23) only (window 6 -> start floor(17) = 16)
    replace(_case([], 0, False, ("SWA", "QSA_COMPRESSED")), swa_free_pages=(3, 12, 8, 5, 6, 9)),
    # the same with the radix cache: an L1 prefix of two pages, D 8 (device-resident only: SGLang refuses HiCache for
    # an SWA model's decode radix cache); the tail keeps max(W, ps) + 1 = 7 tokens
    replace(_case([40, 41], 8, False, ("SWA", "DSA")), swa_free_pages=(3, 12, 8, 5, 6, 9)),
    _case([40, 41], 8, False, ("QSA_COMPRESSED", "MINIMAX_INDEX_K")),
    _case([40], 8, False, ("QSA_COMPRESSED",)),  # L1 4 + L2 host 4 -> D 8, restore pending
    _case([40], 8, True, ("BLOCK_SCALE", "DSA")),  # the same on a reused row
    _WHOLE_SWA,
]


def swa_holders(case: DecodeCase, trace: DecodeTrace) -> list[int | None]:
    """With an SWA pool: the SWA page the request holds for each logical page of ``[0, L)`` (None: none)."""
    ps = case.page_size
    return [trace.swa_page(j * ps, ps) for j in range(-(-case.length // ps))]


def holders(case: DecodeCase, trace: DecodeTrace, d: int) -> list[int | None]:
    """The physical page the request holds for each logical page of ``[0, L)`` on decode (None: none), for the
    prefix ``d`` decode announced: ``[0, L1)`` its device prefix, ``[L1, d)`` restores, ``[d, L)`` its allocation."""
    ps, l1 = case.page_size, case.l1_prefix
    out: list[int | None] = []
    for j in range(-(-case.length // ps)):
        pos = j * ps
        if pos < l1:
            out.append(case.l1_row[pos] // ps)
        elif pos < d:
            k = pos - l1
            out.append(trace.restore[k] // ps if k < len(trace.restore) else None)
        else:
            k = pos - d
            out.append(trace.allocated[k] // ps if k < len(trace.allocated) else None)
    return out


@examples("case", EXAMPLES)
@prop(
    "D1",
    "every page in decode's destination lists (main KV, SWA, DSA, MiniMax index-K, full-from-0 state) is the "
    "page the request holds for that position: never page 0, never a stale id of a reused row",
    clauses=(
        Clause("destinations", title="the main KV list names the pages the request holds from the announced prefix"),
        Clause("aux", title="the metadata buffer is the request's"),
        Clause("int32", FROM_INT32_WIRE, "the main list is int32, as the wire carries it"),
        Clause("announced_prefix", DECODE_PREFIXES, "the announced prefix lies in [L1, D], page-aligned"),
        Clause("state_lists", FROM_STATE_PAYLOADS, "each state list names the pages the request holds"),
    ),
    needs=NEEDS,
    case=decode_cases(),
)
def test_d1_destinations_are_held(target: Target, device: str, case: DecodeCase) -> None:
    if case.decode_prefix > case.l1_prefix:
        note_event("HiCache restore pending (D > L1)")
    if any(case.stale_row):
        note_event("reused row")
    within_release(case)
    trace: DecodeTrace = target.require("decode_prealloc")(case, device)
    ps, n, d = case.page_size, case.length, trace.decode_prefix_len
    if applies("int32"):
        assert trace.dtype == "int32", f"decode's main list is {trace.dtype}, the wire carries int32"
    if applies("announced_prefix"):
        # decode promises prefill the prefix it holds or is restoring: all of its hit D, or (declining the host part
        # of the hit) as little as its device prefix L1 - never more than it has, never less than its device prefix
        assert isinstance(d, int) and case.l1_prefix <= d <= case.decode_prefix and d % ps == 0, (
            f"decode sent decode_prefix_len={d}, outside [L1, D] = [{case.l1_prefix}, {case.decode_prefix}] (ps {ps})"
        )
    else:  # a release before decode prefixes announces none: decode holds nothing before position 0
        d = 0
    if d < case.decode_prefix:
        note_event("decode declined its host hit (D sent < D matched)")
    held = holders(case, trace, d)
    if applies("aux"):
        assert trace.aux_index == case.aux_index, f"aux {trace.aux_index}, expected {case.aux_index}"
    lists: list[tuple[str, int, tuple[int, ...]]] = [("main KV", d, trace.pages)] if applies("destinations") else []
    if applies("state_lists"):
        assert len(trace.state) == len(case.state_types), f"{len(trace.state)} state lists for {case.state_types}"
        for kind, values in zip(case.state_types, trace.state, strict=True):
            start = state_list_start(kind, page_size=ps, decode_prefix=d, length=n, window=case.window)
            if start is not None:
                lists.append((kind, start, values))
    swa_held = swa_holders(case, trace) if case.swa_free_pages is not None else None
    if swa_held is not None:
        note_event(f"hybrid SWA pool ({'SWA tail pre-allocation' if case.swa_tail else 'the whole sequence in SWA'})")
    for name, start, values in lists:
        pool = swa_held if swa_held is not None and name in ("SWA", "BLOCK_SCALE_SWA") else held
        want = pool[start // ps :]
        got = list(values)
        bad = [(start // ps + i, g, w) for i, (g, w) in enumerate(zip(got, want, strict=False)) if w is None or g != w]
        assert len(got) == len(want) and not bad, (
            f"{name} list {got} from position {start}: logical page, sent, held = {bad} "
            f"(held for [0, L): {pool}; L1={case.l1_prefix}, D={d}, L={n}; page 0 is padding)"
        )


@examples("case", EXAMPLES)
@prop(
    "D4",
    "the prefix decode announces to prefill is the prefix its tree owns: cache_protected_len == decode_prefix_len, "
    "page-aligned (SGLang's own assert in mem_cache/common.py; decode's checksum verification starts there)",
    needs=NEEDS,
    case=decode_cases(),
    contract=DECODE_PREFIXES,  # a release without decode prefixes announces none and its tree owns none
)
def test_d4_announced_prefix_is_protected(target: Target, device: str, case: DecodeCase) -> None:
    within_release(case)
    trace: DecodeTrace = target.require("decode_prealloc")(case, device)
    d, protected = trace.decode_prefix_len, trace.cache_protected_len
    assert protected is not None, "decode_prealloc reported no cache_protected_len"
    assert protected == d, f"the tree owns [0, {protected}) while decode announced decode_prefix_len={d} to prefill"
    assert protected % case.page_size == 0, f"cache_protected_len={protected} is not page-aligned (ps {case.page_size})"


def pending_request_state(row: int, length: int, layout: tuple[int, bool, int]) -> list[int]:
    """The oracle of DeepSeek-V4's request-state transfer: what of a prompt of ``length`` tokens is still pending
    compression is its last partial block of ``ratio`` tokens (none when ``length`` ends a block); decode registers
    the one item that holds it - the row's pair ring (ratio 2, one item per row), the row's online state (one item
    per row), or the page of ``ratio`` ring slots, among the row's ``ring_size / ratio``, that the block's first
    position maps to."""
    ratio, online, ring_size = layout
    block_start = length - length % ratio
    if block_start == length:
        return []
    if ratio == 2 or online:
        return [row]
    pages_per_row = ring_size // ratio
    return [row * pages_per_row + block_start % ring_size // ratio]


@examples("case", [
    replace(EXAMPLES[0], state_types=("DSV4_REQUEST_STATE",)),
    replace(EXAMPLES[4], state_types=("DSV4_REQUEST_STATE", "DSA"), request_state=(128, False, 256)),
    replace(EXAMPLES[5], state_types=("DSV4_REQUEST_STATE",), request_state=(2, False, 4)),
])  # fmt: skip
@prop(
    "D2",
    "DeepSeek-V4 request-scoped state: before the metadata goes out decode resets its row's whole state ring (a "
    "reused row holds the previous request's) and no other row's, and registers the one item holding the prompt's "
    "pending partial compression block (none at a block boundary)",
    needs=NEEDS,
    case=decode_cases(max_length=520, max_page_size=128),
    contract=FROM_DSV4_REQUEST_STATE,  # the state type it is about: a release without it has nothing to check
)
def test_d2_request_state(target: Target, device: str, case: DecodeCase) -> None:
    within_release(case)
    trace: DecodeTrace = target.require("decode_prealloc")(case, device)
    if "DSV4_REQUEST_STATE" not in case.state_types:
        assert not trace.cleared_rows, f"request state cleared for rows {trace.cleared_rows} without the state type"
        return
    ratio, online, ring_size = case.request_state
    note_event(f"DSV4 request state, ratio {ratio}{' online' if online else ''}")
    row = trace.req_pool_idx
    assert trace.cleared_rows == (row,), (
        f"rows {trace.cleared_rows} had their request-state ring reset before the metadata, expected ({row},)"
    )
    got = list(trace.state[case.state_types.index("DSV4_REQUEST_STATE")])
    want = pending_request_state(row, case.length, case.request_state)
    if not want:
        note_event("DSV4 prompt ends a compression block")
    assert got == want, (
        f"request-state items {got}, expected {want}: row {row}, L={case.length}, ratio {ratio}, online {online}, "
        f"ring {ring_size}"
    )


@examples(
    "case",
    [
        replace(EXAMPLES[3], free_pages=(11, 62), evictable_pages=(38, 61, 48, 33, 50, 7)),
        # cached sequences of 3, 1 and 2 pages: two pages short evicts the first sequence whole
        replace(EXAMPLES[3], free_pages=(11, 62), evictable_pages=(38, 61, 48, 33, 50, 7), evictable_leaves=(3, 1, 2)),
    ],
)
@prop(
    "D3",
    "memory pressure with the radix cache: pre-allocation evicts the cache's least recently used cached sequences, "
    "each whole, until they cover the pages the request lacks for [L1, fill_len) beyond the free list - the fewest "
    "that do - and nothing when the free list suffices (and D1 holds for what it registers)",
    needs=NEEDS,
    case=decode_cases(),
    contract=DECODE_PREFIXES,  # the decode radix cache came with decode prefixes: no cache to evict from before
)
def test_d3_evicts_the_shortfall(target: Target, device: str, case: DecodeCase) -> None:
    within_release(case)
    trace: DecodeTrace = target.require("decode_prealloc")(case, device)
    ps = case.page_size
    short = -(-case.fill_len // ps) - case.l1_prefix // ps - len(case.free_pages)
    want: list[int] = []
    sizes = list(case.evictable_leaves or [1] * len(case.evictable_pages))
    pages = list(case.evictable_pages)
    while case.decode_prefix and len(want) < short and pages:  # whole leaves, least recently used first
        n = sizes.pop(0)
        want, pages = want + pages[:n], pages[n:]
    if want:
        note_event("radix eviction" + (" of a multi-page sequence" if len(want) > short else ""))
    assert sorted(trace.evicted) == sorted(want), (
        f"evicted {list(trace.evicted)} ({len(trace.evicted)} pages), the request lacks {max(short, 0)} (free "
        f"{len(case.free_pages)} pages for [{case.l1_prefix}, {case.fill_len}) at page size {ps}): expected the "
        f"leading cached sequences {want}, whole"
    )
    assert set(trace.evicted) <= set(case.evictable_pages), f"evicted {trace.evicted}, not evictable pages"
