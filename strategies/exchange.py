"""Strategies for one request at scheduler level: ``prefill_cases`` (prefill's sends), ``decode_cases``
(decode's pre-allocation) and ``state_lists`` (the metadata wire)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pdverify.model.exchange import (
    DEFERRED_ROOMS,
    DP_BALANCE,
    RANK_SPLITS,
    REQUEST_STATE_LAYOUTS,
    SWA_WINDOW_TYPES,
    DecodeCase,
    PrefillCase,
    swa_tail_start,
)
from pdverify.model.layout import pages_needed, token_locations
from pdverify.model.pools import STATE_POOLS, StatePool
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.fields import REGISTRY, draw_fields
from pdverify.strategies.layouts import (
    boundary_length,
    boundary_prefix,
    draw_chunk_ends,
    page_size_list,
    pick_page_size,
)

MODES = ("plain", "dcp", "staging")


def prefill_cases(
    *, max_length: int = 96, max_chunks: int = 6, max_page_size: int = 16, early_send: bool = False
) -> st.SearchStrategy[PrefillCase]:
    """A request on the prefill side: a page size, a prompt of ``1..max_length`` tokens on fragmented distinct pages
    (half the lengths at a page boundary or one off it), a page-aligned decode prefix ``D`` anywhere in ``[0, L]``
    (one time in four the largest: ``D == L``, a full decode hit, or the last page partly past it), a chunk
    schedule, one of plain sends / a DCP pack buffer (its prefill buffer ceiling any of ``1..4 * page_size`` tokens,
    the room's own decode peer relayouting or, half the time, a peer of prefill's DCP size) / the staging grid (a
    ``chunked_prefill_size`` of 1-4 pages), an early cached-prefix send or none (half of them a page-aligned prefix
    in ``(D, L)``, the kind the code sends; the rest any prefix below ``L``, which the code skips when unaligned or
    within ``D``), an int64 virtual-to-physical translation (a page table) or none, the model's KV pool (one of
    ``STATE_POOLS`` the release builds: its state types are the pool's registration, its page size the one the server
    runs the pool at - DSA 64 or 256, QSA 64, MXFP8 128, whatever ``max_page_size``, with a prompt of up to three of
    those pages - and a decode prefix only where the decode server accepts the radix cache for the model), with an
    SWA window list an SWA pool of prefill's own (``swa_pages``), a sender taking host tensors (Mooncake) or numpy
    lists, a sliding window and its ring, the request's row and its aux index; the KV checksum off or on (for a
    request or a health check); with an early send, a HiCache host hit behind its device prefix or none. The first
    choice is a lean (``Choices.lean``): under one, every option shrinks to on (a pool with state) and the lengths
    to their page boundaries. With
    ``early_send``, every request whose prompt reaches a page past ``D`` has an early send of the kind the code
    ships (a page-aligned prefix in ``(D, L)``): for properties about what holds an early send back."""
    check_int("max_length", max_length)
    check_int("max_chunks", max_chunks, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    if not isinstance(early_send, bool):
        raise TypeError(f"early_send must be a bool, got {early_send!r}")
    return _prefill_cases(
        max_length=max_length, max_chunks=max_chunks, max_page_size=max_page_size, early_send=early_send
    )


@st.composite
def _prefill_cases(
    draw: st.DrawFn, *, max_length: int, max_chunks: int, max_page_size: int, early_send: bool
) -> PrefillCase:
    c = Choices(draw)
    c.lean()
    return draw_prefill_case(
        c, max_length=max_length, max_chunks=max_chunks, max_page_size=max_page_size, early_send=early_send
    )


def draw_prefill_case(
    c: Choices, *, max_length: int, max_chunks: int, max_page_size: int, early_send: bool = False
) -> PrefillCase:
    """``prefill_cases``' example, drawn from ``c``; optional settings shrink to absent."""
    pool = draw_pool(c, prefill=True)
    # pages came with #5561 (0.4.5.post2), decode-side prefixes in 0.5.11: an earlier release sees neither
    ps = _pool_page_size(c, pool, max_page_size)
    # a prompt of at least one token: SGLang refuses empty input_ids (``GenerateReqInput``: "input_ids cannot be
    # empty", and the scheduler rejects a session request still empty after reconstruction)
    n = boundary_length(c, min(1, max_length), _pool_length(pool, max_length, ps), ps)
    d = boundary_prefix(c, n, ps) if DOMAIN.decode_prefix and not _refuses_decode_prefix(pool) else 0
    return draw_prefill_sends(c, ps, n, d, max_chunks=max_chunks, early_send=early_send, state_types=pool.prefill_types)


def draw_prefill_sends(
    c: Choices,
    ps: int,
    n: int,
    d: int,
    *,
    max_chunks: int,
    shared: DecodeCase | None = None,
    early_send: bool = False,
    state_types: tuple[str, ...] = (),
) -> PrefillCase:
    """Prefill's side of a request of ``n`` tokens with decode prefix ``d``: its own fragmented pages, chunk
    schedule, send mode, early send and translation; the state types, window, ring and aux index are drawn, or
    taken from decode's ``shared`` case (both sides of one request agree on them)."""
    count = pages_needed(n, ps)
    pages = distinct_sample(c, 1, count + 64, count)
    ends = tuple(draw_chunk_ends(c, n, max_chunks=max_chunks))
    # each lean its own mode; DCP's pack limit on a send came in 0.5.21, the staging buffer in 0.5.10
    gates = {"dcp": "dcp_pack_limit", "staging": "staging_buffer"}
    mode = c.pick([m for m in MODES if m not in gates or DOMAIN.has(gates[m])], lean=c.leaning - 1)
    # drawn, then dropped where the release has no early send (#29316, 0.5.15): later draws keep their meaning
    early = _early_prefix(c, n, d, ps, ships=early_send) if DOMAIN.has("early_send") else None
    window = shared.window if shared else c.integer(1, 40)
    case = PrefillCase(
        page_size=ps,
        length=n,
        decode_prefix=d,
        row=tuple(token_locations(pages, n, ps)),
        chunk_ends=ends,
        req_pool_idx=c.integer(0, 3),
        # the prefill buffer ceiling that sized the DCP pack buffer: chunked_prefill_size (a page multiple) or, chunked
        # prefill off, max_prefill_tokens (any): the limit is it rounded up to a page
        dcp_max_tokens=c.integer(1, 4 * ps) if mode == "dcp" else None,
        # staging's chunk size: a page multiple (SGLang's prefill refuses staging with any other)
        chunked_prefill_size=c.integer(1, 4, lean=1) * ps if mode == "staging" else None,
        early_prefix=early,
        # unified-memory pools (translated int64 ids) came in 0.5.18
        translation=draw_translation(c, pages, ps) if DOMAIN.has("translated_ids") and c.boolean(lean=True) else None,
        state_types=shared.state_types if shared else state_types,
        host_tensor_indices=c.boolean(lean=True) if DOMAIN.has("host_tensor_indices") else False,
        overlap=c.boolean(lean=True),
        window=window,
        ring_size=shared.ring_size if shared else window + c.integer(0, 8),
        aux_index=shared.aux_index if shared else c.integer(0, 2**31 - 1),
    )
    # drawn last: earlier choices keep their meaning (the KV checksum came in 0.5.21, #39500)
    if shared is None and DOMAIN.has("kv_checksum") and c.boolean(lean=True):
        case = replace(case, kv_checksum=True, health_check=c.boolean())
    # a host hit behind the device prefix
    if shared is None and early is not None and early + 1 < n and c.boolean(lean=True):
        case = replace(case, host_hit_length=c.integer(1, n - 1 - early))
    # the room's peer has prefill's DCP size, the pack buffer another decode instance's (drawn after the rest)
    if case.dcp_max_tokens is not None and c.boolean(lean=True):
        case = replace(case, dcp_relayout=False)
    if any(k in SWA_WINDOW_TYPES for k in case.state_types):  # a hybrid SWA model: prefill's own SWA pool
        case = replace(case, swa_pages=_swa_pages(c, case))
    if REGISTRY:  # registered request fields, drawn last (nothing drawn, nothing changed, when none is registered)
        case = replace(case, extra=draw_fields(c))
    return case


def _swa_pages(c: Choices, case: PrefillCase) -> tuple[int, ...]:
    """The SWA page of each page of ``case``'s row (``PrefillCase.swa_pages``): distinct pages of the SWA pool, in
    its own (seeded) order; under a coin the pages wholly before ``L - W`` are released (0), as the SWA pool
    frees what slid out of the window."""
    count = pages_needed(case.length, case.page_size)
    pages = distinct_sample(c, 1, count + 64, count)
    if c.boolean(lean=True):
        first = max(0, case.length - case.window) // case.page_size
        pages[:first] = [0] * first
    return tuple(pages)


def draw_pool(c: Choices, *, prefill: bool = False, request_state: bool = True) -> StatePool:
    """One of ``STATE_POOLS`` the bound release builds: a pool whose state types it all registers (none with state
    before state payloads, #10912, 0.5.3.post3); ``request_state`` False leaves out the pools with DeepSeek-V4's
    request state (a side that does not model it). Shrinks to the dense pool, which registers none; under a lean a
    pool with state (by the lean: MiniMax-M3, DSA, the most state types). ``prefill``: pools that differ only
    in request state count once (prefill's model has none)."""
    pools = [p for p in STATE_POOLS if _builds(p) and (request_state or "DSV4_REQUEST_STATE" not in p.state_types)]
    if prefill:
        views = [p.prefill_types for p in pools]
        pools = [p for i, p in enumerate(pools) if views.index(views[i]) == i]
    # under each lean a pool with state: MiniMax-M3's (a suffix and a full list at any page size), a DSA model's (the
    # suffix at its page size), the one with the most state types the side models (a sliding window among them)
    rich = max(range(len(pools)), key=lambda i: len(pools[i].prefill_types if prefill else pools[i].state_types))
    leans = [next((i for i, p in enumerate(pools) if p.name == name), rich) for name in ("minimax", "dsa")] + [rich]
    return c.pick(pools, lean=leans[max(0, c.leaning - 1) % len(leans)])


def _builds(pool: StatePool) -> bool:
    """Whether the bound release builds ``pool`` for PD: it has the pool's feature (``StatePool.feature``), it
    registers each of its state types (``StateType``), and before the per-type lists (#24932, 0.5.12) only a pool
    of one payload, SWA or DSA, has any."""
    kinds = pool.state_types
    if pool.feature is not None and not DOMAIN.has(pool.feature):
        return False
    if not kinds:
        return True
    if not DOMAIN.has("state_payloads") or DOMAIN.state_types(kinds) != kinds:
        return False
    return DOMAIN.has("state_lists") or kinds in (("SWA",), ("DSA",))


def _pool_page_size(c: Choices, pool: StatePool, max_page_size: int) -> int:
    """The page size: the pool's own where the server fixes it (whatever ``max_page_size``), else any up to
    ``max_page_size``; 1 before paged transfer (#5561, 0.4.5.post2)."""
    if not DOMAIN.has("paged_transfer"):
        return 1
    sizes = page_size_list(max_page_size)
    ps = pick_page_size(c, sizes)  # drawn for every pool: the choices after it keep their places when one shrinks
    if pool.hybrid_swa and not DOMAIN.has("swa_paged_pool"):
        # a hybrid SWA pool is token-granular before #16296 (0.5.7's model_runner_kv_cache_mixin.py asserts
        # `not self.is_hybrid_swa` for a page size above 1)
        return 1
    if pool.page_sizes is not None:
        return pool.page_sizes[sizes.index(ps) % len(pool.page_sizes)]
    return ps


def _pool_length(pool: StatePool, max_length: int, ps: int) -> int:
    """The longest prompt drawn: ``max_length``, or three pages and a token where the pool fixes a page size (a DSA
    pool's 64, MXFP8's 128, DeepSeek-V4's 256): a prompt of several of its pages, with a decode prefix short of it,
    up to one token past a page boundary."""
    return max(max_length, 3 * ps + 1) if pool.fixed_page_size else max_length


def _refuses_decode_prefix(pool: StatePool) -> bool:
    """Whether the release's decode server refuses its radix cache for ``pool``'s model, so that decode holds no
    prefix: a hybrid SWA model before 0.5.19 (``swa_decode_prefix``), DeepSeek-V4 before 0.5.23
    (``dsv4_decode_prefix``)."""
    if "DSV4_REQUEST_STATE" in pool.state_types and not DOMAIN.has("dsv4_decode_prefix"):
        return True
    return any(k in SWA_WINDOW_TYPES for k in pool.state_types) and not DOMAIN.has("swa_decode_prefix")


def _early_prefix(c: Choices, n: int, d: int, ps: int, *, ships: bool = False) -> int | None:
    """The cached prefix an early send may cover: none half the time; else, half the time, a page-aligned one
    in ``(D, L)`` - the only kind the code sends early, and a uniform draw below ``L`` hits one about once in
    ``page_size`` (the generation-only measurement missed the overlap wait there) - otherwise any prefix below
    ``L`` (unaligned, or within decode's prefix: skipped by the code). ``ships``: always the kind the code sends,
    where the prompt has a page past ``D`` (else none)."""
    lo, hi = d // ps + 1, (n - 1) // ps
    if ships:
        return c.integer(lo, hi) * ps if lo <= hi else None
    if not n or not c.boolean(lean=True):
        return None
    if lo <= hi and c.boolean(lean=True):
        return c.integer(lo, hi) * ps
    prefix = c.integer(0, n - 1)
    if prefix > d and not DOMAIN.has("dcp_prefill"):  # a cached tail off the page needs prefill-side DCP (#32837)
        prefix = prefix // ps * ps
    return prefix


def rank_splits(*, max_ranks: int = 4) -> st.SearchStrategy[tuple[str, int]]:
    """How the prefill ranks of a request share its transfer: a mode of ``RANK_SPLITS`` the bound release has and
    ``2..max_ranks`` ranks (a property runs every rank). A release with none of them (before attention CP, 0.5.10)
    is never given one: drawing there raises ``InvalidArgument`` naming the release and the features."""
    check_int("max_ranks", max_ranks, minimum=2)
    return _rank_splits(max_ranks=max_ranks)


def split_modes() -> list[str]:
    """The modes of ``RANK_SPLITS`` the bound release has: KV cache sharding from 0.5.22 (#30501), attention CP's
    (a dummy CP rank, all CP ranks sharing the transfer) from 0.5.10 (#19504, #19765)."""
    return [m for m in RANK_SPLITS if DOMAIN.has("kv_cache_sharding" if m == "kv_shard" else "attention_cp")]


@st.composite
def _rank_splits(draw: st.DrawFn, *, max_ranks: int) -> tuple[str, int]:
    modes = split_modes()
    if not modes:
        raise InvalidArgument(
            f"rank_splits: sglang {DOMAIN.release} has no way for prefill ranks to share a transfer (attention CP "
            "from 0.5.10, KV cache sharding from 0.5.22): a property that draws it applies from FROM_ATTENTION_CP"
        )
    return draw(st.sampled_from(modes)), draw(st.integers(2, max_ranks))


def draw_translation(c: Choices, pages: list[int], page_size: int) -> tuple[int, ...]:
    """A virtual-to-physical page table covering ``pages``: distinct physical pages >= 1 in a seeded order, low
    ones or ones whose token ids lie past int32 (where a lost int64 shows in the values, not only the dtype);
    entry 0 and unused entries are the sink 0. Shrinks to the low identity-like table."""
    size = max(pages, default=0) + 1
    low = 1 if not c.boolean(lean=True) else 2**31 // page_size + 1
    physical = distinct_sample(c, low, low + size + 64, size)
    used = set(pages)
    return tuple(physical[v] if v in used else 0 for v in range(size))


def state_lists(*, max_lists: int = 4, max_size: int = 16) -> st.SearchStrategy[list[list[int]]]:
    """Decode's state lists as they go on the wire: up to ``max_lists`` lists of int32 page or slot ids
    (empty lists included)."""
    check_int("max_lists", max_lists)
    check_int("max_size", max_size)
    return st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=max_size), max_size=max_lists)


def decode_cases(*, max_length: int = 64, max_page_size: int = 16) -> st.SearchStrategy[DecodeCase]:
    """A request admitted on decode: a page size, a prompt of ``1..max_length`` tokens (half of them at a page
    boundary or one off it) and 0..3 output tokens; the decode radix cache off (no prefix) or on with a device (L1)
    prefix and a decode prefix ``D >= L1`` (both page-aligned, ``D`` up to ``L``, one time in four the largest; ``L1
    == D`` one time in four) whose ``[L1, D)`` part is a HiCache host hit still being restored; a fresh
    request-to-token row (zeros) or one reused from an earlier request (its stale ids left in place); the allocator's
    free pages in a fragmented order; the model's KV pool (``draw_pool``: its registration as the state types, its
    page size where the server fixes one, no decode prefix where the server refuses the radix cache for the model, no
    HiCache host hit for a hybrid SWA model); with a page size above
    1, at most one output token (a request as prefill hands it over) and no HiCache host hit (SGLang serves a hybrid
    SWA model's decode radix cache from the device only), one full pool or a hybrid SWA pool with SWA tail
    pre-allocation (its SWA pages fragmented too); with the radix cache, free pages to spare or a pool partly
    held by the cache (evictable: cached sequences of 1-4 pages, each a leaf evicted whole), down to none free;
    with a DeepSeek-V4 pool, its request state in one of the layouts SGLang builds (``REQUEST_STATE_LAYOUTS``)."""
    check_int("max_length", max_length, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    return _decode_cases(max_length=max_length, max_page_size=max_page_size)


@st.composite
def _decode_cases(draw: st.DrawFn, *, max_length: int, max_page_size: int) -> DecodeCase:
    c = Choices(draw)
    c.lean()
    return draw_decode_case(c, max_length=max_length, max_page_size=max_page_size)


def draw_decode_case(c: Choices, *, max_length: int, max_page_size: int, alone: bool = True) -> DecodeCase:
    """``decode_cases``' example, drawn from ``c``. ``alone``: decode on its own, with what the exchange pair's prefill
    model does not cover (DeepSeek-V4's request state, memory pressure on the decode radix cache)."""
    pool = draw_pool(c, request_state=alone)
    hybrid_swa = pool.hybrid_swa
    # pages came with #5561 (0.4.5.post2): before, decode registers token slots, page size 1
    ps = _pool_page_size(c, pool, max_page_size)
    n = boundary_length(c, 1, _pool_length(pool, max_length, ps), ps)
    # the SWA buffer's allocation is the server's, not a choice: the window's tail wherever the release has tail
    # pre-allocation and the page size is above 1 (decode.py _uses_swa_tail_prealloc), else the whole sequence
    tail = hybrid_swa and ps > 1 and DOMAIN.has("swa_tail_prealloc")
    # a request prefill hands over carries its first output token only: the tail is sized from fill_len
    outputs = c.integer(0, 1 if tail else 3, lean=1)
    fill = n + max(outputs - 1, 0)
    d = l1 = 0
    # the decode radix cache (and HiCache) on, where the server accepts it for the model
    if DOMAIN.has("decode_prefixes") and not _refuses_decode_prefix(pool) and c.boolean(lean=True):
        d = boundary_prefix(c, n, ps)
        l1 = d if c.integer(0, 3) == 3 else c.integer(0, d // ps) * ps  # one time in four the whole hit on device
        # no host hit before decode HiCache (0.5.13), nor for a hybrid SWA model, whose decode radix cache SGLang
        # serves from the device only (it refuses --enable-hierarchical-cache there, kv_cache_builder.py)
        if not DOMAIN.has("decode_hicache") or hybrid_swa:
            l1 = d
    needed = l1 // ps + pages_needed(fill, ps) + 8
    pages = distinct_sample(c, 1, needed + 32, needed)
    width = fill + ps
    stale = [0] * width
    if c.boolean(lean=True):  # a reused row: an earlier request's ids are still there
        old = distinct_sample(c, 1, needed + 32, pages_needed(width, ps))
        stale = token_locations(old, width, ps)
    window = c.integer(1, 40)
    free = pages[l1 // ps :]
    case = DecodeCase(
        page_size=ps,
        length=n,
        output_len=outputs,
        l1_row=tuple(token_locations(pages[: l1 // ps], l1, ps)),
        decode_prefix=d,
        stale_row=tuple(stale),
        free_pages=tuple(free),
        state_types=pool.state_types,
        window=window,
        ring_size=window + c.integer(0, 8),
        aux_index=c.integer(0, 2**31 - 1),
    )
    # drawn last: earlier choices keep their meaning. A hybrid SWA model's pool (drawn only where the release builds
    # one, with a decode prefix only where it accepts the radix cache for it: draw_pool, _refuses_decode_prefix) has
    # an SWA buffer of its own, at a page size above 1 from #16296 (0.5.8: _pool_page_size)
    if hybrid_swa:
        if tail and d:  # the radix match stops before the SWA tail (max_prefix_len = fill - tail)
            cap = swa_tail_start(fill, window, ps, radix=True)
            if d > cap:
                d = l1 = cap
                case = replace(case, decode_prefix=d, l1_row=case.l1_row[:d], free_pages=tuple(pages[d // ps :]))
        count = pages_needed(fill, ps) + 2
        swa_pages = tuple(distinct_sample(c, 1, count + 32, count))
        case = replace(case, swa_free_pages=swa_pages, swa_tail=tail)
    # memory pressure: part of the pool cached
    if alone and d and case.swa_free_pages is None and c.boolean(lean=True):
        short = c.integer(1, len(free))
        leaves: list[int] = []  # the cached sequences those pages belong to: a leaf of 1-4 pages, evicted whole
        while sum(leaves) < short:
            leaves.append(min(c.integer(1, 4), short - sum(leaves)))
        case = replace(case, free_pages=tuple(free[short:]), evictable_pages=tuple(free[:short]),
                       evictable_leaves=tuple(leaves) if any(n > 1 for n in leaves) else ())  # fmt: skip
    # DeepSeek-V4's request-scoped state (decode only: prefill's port has none): the layout of its pool
    if "DSV4_REQUEST_STATE" in pool.state_types:
        # the ratio-2 pair rings came in 0.5.21: an earlier release is never given one
        layouts = [x for x in REQUEST_STATE_LAYOUTS if x[0] != 2 or DOMAIN.has("dsv4_pair_state")]
        case = replace(case, request_state=c.pick(layouts, lean=1))  # under a lean the MTP ring: two pages a row
    if not DOMAIN.has("state_lists"):  # before #24932 (0.5.12): one state payload, the one the KV pool's type has
        case = replace(case, state_types=_pool_state(case))
    if REGISTRY:  # registered request fields, drawn last
        case = replace(case, extra=draw_fields(c))
    return case


def _pool_state(case: DecodeCase) -> tuple[str, ...]:
    """The state types of ``case`` a release before the per-type state lists can have: the one its pool's type
    carries - the SWA window with a hybrid SWA pool, else DSA (DeepSeek's sparse-attention pool) where drawn - and
    none before state payloads (#10912, 0.5.3.post3), where ``case`` has no SWA pool either."""
    if not DOMAIN.has("state_payloads"):
        return ()
    if case.swa_free_pages is not None:
        return ("SWA",)
    return ("DSA",) if "DSA" in case.state_types else ()


def pd_exchanges(*, max_length: int = 64, max_page_size: int = 16) -> st.SearchStrategy[tuple[PrefillCase, DecodeCase]]:
    """One request seen from both sides: a ``DecodeCase`` (``decode_cases``) and the ``PrefillCase`` of the same
    prompt - same page size, length, decode prefix ``D``, state types, window and ring - on prefill's own
    fragmented pages, with its own chunk schedule, send mode, early send and translation."""
    check_int("max_length", max_length, minimum=1)
    return _pd_exchanges(max_length=max_length, max_page_size=max_page_size)


@st.composite
def _pd_exchanges(draw: st.DrawFn, *, max_length: int, max_page_size: int) -> tuple[PrefillCase, DecodeCase]:
    c = Choices(draw)
    c.lean()
    dec = draw_decode_case(c, max_length=max_length, max_page_size=max_page_size, alone=False)
    return draw_prefill_sends(c, dec.page_size, dec.length, dec.decode_prefix, max_chunks=4, shared=dec), dec


def bootstrap_settings(*, max_dp_ranks: int = 4) -> st.SearchStrategy[dict[str, object]]:
    """What a KV sender meets at its creation, as ``PrefillCase`` fields: deferred decode allocation off or on
    with a fresh, duplicate or cancelled room; attention DP off or on (``2..max_dp_ranks`` ranks, this sender's
    rank, the balance method, the request placed by the router or not); request tracing off or on; a dummy decode
    rank beside the real one or not; a bootstrap room (small, or past 2**31)."""
    check_int("max_dp_ranks", max_dp_ranks, minimum=2)
    return _bootstrap_settings(max_dp_ranks=max_dp_ranks)


@st.composite
def _bootstrap_settings(draw: st.DrawFn, *, max_dp_ranks: int) -> dict[str, object]:
    c = Choices(draw)
    room = c.integer(0, 64) if not c.boolean() else c.integer(2**31, 2**40)
    deferred = c.pick(DEFERRED_ROOMS) if c.boolean() and DOMAIN.has("deferred_allocation") else None
    dp = None
    if c.boolean() and DOMAIN.has("dp_rank_query"):  # prefill's DP rank registration came in 0.5.10 (#19168)
        ranks = c.integer(2, max_dp_ranks)
        dp = (ranks, c.integer(0, ranks - 1), c.pick(DP_BALANCE), c.boolean())
    return {
        "bootstrap_room": room,
        "deferred_room": deferred,
        "attention_dp": dp,
        "trace_requests": c.boolean(),
        "dummy_peer": c.boolean(),
    }
