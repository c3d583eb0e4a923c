"""The strategies generate in-contract inputs only and reject bad arguments with ``InvalidArgument``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

from pdverify.model.batch import PrebuiltBatch, validate_batch
from pdverify.model.layout import PADDING_PAGE, PagedRow
from pdverify.strategies import (
    PDPair,
    batches,
    bootstrap_cases,
    bootstrap_settings,
    checksum_cases,
    chunk_schedules,
    decode_queues,
    index_dtypes,
    page_sizes,
    paged_rows,
    pd_exchanges,
    pd_pairs,
    prefill_cases,
    rank_splits,
    requests,
    sender_cases,
    token_index_lists,
)


@settings(max_examples=50, database=None)
@given(row=paged_rows())
def test_paged_rows_in_contract(row: PagedRow) -> None:
    assert PADDING_PAGE not in row.pages and len(set(row.pages)) == len(row.pages)
    assert row.prefix_len % row.page_size == 0 and 0 <= row.prefix_len <= row.length
    for i, loc in enumerate(row.locations):
        assert loc % row.page_size == i % row.page_size


@settings(max_examples=50, database=None)
@given(pair=pd_pairs())
def test_pd_pairs_share_shape(pair: PDPair) -> None:
    assert pair.prefill.length == pair.decode.length and pair.prefill.prefix_len == pair.decode.prefix_len
    assert pair.chunk_ends[-1] == pair.length and pair.chunk_ends == sorted(pair.chunk_ends)


@settings(max_examples=50, database=None)
@given(batch=batches())
def test_batches_in_contract(batch: PrebuiltBatch) -> None:
    validate_batch(batch)
    pools = [r.req_pool_idx for r in batch.reqs]
    assert len(set(pools)) == len(pools), "two requests share a row"
    slots = [v for row in batch.req_to_token for v in row]
    assert len(set(slots)) == len(slots), "slot values repeat across the table"


@settings(max_examples=20, database=None)
@given(ps=page_sizes(max_size=8, odd=False), dt=index_dtypes(), xs=token_index_lists(max_size=4))
def test_small_strategies(ps: int, dt: Any, xs: list[int]) -> None:
    assert ps in (1, 2, 4, 8) and len(xs) <= 4 and str(dt) in ("torch.int32", "torch.int64")


@settings(max_examples=20, database=None)
@given(row=paged_rows(st.just(4), max_length=9, prefix=False), ends=chunk_schedules(9, max_chunks=1))
def test_fixed_arguments(row: PagedRow, ends: list[int]) -> None:
    assert row.page_size == 4 and row.prefix_len == 0 and ends == [9]


@settings(max_examples=5, database=None)
@given(row=paged_rows(7, min_length=3, max_length=3))
def test_fixed_page_size(row: PagedRow) -> None:
    assert row.page_size == 7 and row.length == 3


BAD: list[tuple[str, Any]] = [
    ("max_size", lambda: page_sizes(max_size=0)),
    ("max_size", lambda: page_sizes(max_size=2.5)),  # type: ignore[arg-type]
    ("min_length", lambda: paged_rows(min_length=5, max_length=2)),
    ("page_size", lambda: paged_rows(0)),
    ("spare_pages", lambda: paged_rows(spare_pages=-1)),
    ("length", lambda: chunk_schedules(-1)),
    ("max_chunks", lambda: chunk_schedules(4, max_chunks=0)),
    ("max_size", lambda: token_index_lists(max_size=True)),
    ("req_pool_idx", lambda: requests(-1)),
    ("page_size", lambda: requests(0, page_size=0)),
    ("min_requests", lambda: batches(min_requests=3, max_requests=1)),
    ("max_prompt", lambda: batches(max_prompt=-2)),
    ("page_size", lambda: pd_pairs(0)),
    ("max_length", lambda: pd_pairs(max_length=-1)),
    ("max_chunks", lambda: pd_pairs(max_chunks=0)),
    ("max_requests", lambda: decode_queues(max_requests=0)),
    ("max_ranks", lambda: rank_splits(max_ranks=1)),
    ("max_dp_ranks", lambda: bootstrap_settings(max_dp_ranks=1)),
    ("max_sends", lambda: sender_cases(max_sends=0)),
    ("max_pages", lambda: sender_cases(max_pages=-1)),
    ("max_page_size", lambda: bootstrap_cases(max_page_size=0)),
    ("max_length", lambda: decode_queues(max_length=0)),
    ("max_page_size", lambda: decode_queues(max_page_size=0)),
    ("max_prompt", lambda: checksum_cases(max_prompt=0)),
    ("max_outputs", lambda: checksum_cases(max_outputs=-1)),
    ("max_page_size", lambda: checksum_cases(max_page_size=0)),
    ("max_chunks", lambda: checksum_cases(max_chunks=0)),
    ("kv_cache_dtypes", lambda: checksum_cases(kv_cache_dtypes=())),
    ("kv_cache_dtypes", lambda: checksum_cases(kv_cache_dtypes=("fp16",))),
    ("kv_pools", lambda: checksum_cases(kv_pools=())),
    ("kv_pools", lambda: checksum_cases(kv_pools=("mla",))),
]


@pytest.mark.parametrize(("name", "make"), BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_arguments(name: str, make: Any) -> None:
    with pytest.raises(InvalidArgument, match=name):
        make().validate()


def _mxfp8_past_prompt(c: Any) -> bool:
    return bool(c.kv_cache_dtype == "mxfp8" and c.rebootstrap and -(-c.length // 128) > -(-c.prompt // 128))


@pytest.mark.parametrize(
    ("what", "reached"),
    [
        (
            "a rebootstrap whose kept outputs reach a page past the prompt's (F3's input)",
            lambda c: c.rebootstrap and -(-c.length // c.page_size) > -(-c.prompt // c.page_size),
        ),
        (
            "a rebootstrap whose outputs stay in the prompt's last page",
            lambda c: c.rebootstrap and c.outputs and -(-c.length // c.page_size) == -(-c.prompt // c.page_size),
        ),
        ("a decode prefix past page 0 (T6's input)", lambda c: c.decode_prefix >= c.page_size > 1),
        ("the whole prompt decode's prefix", lambda c: c.decode_prefix == c.prompt),
        (
            "several chunks, an inner end off the page grid",
            lambda c: len(c.chunk_ends) > 1 and any(e % c.page_size for e in c.chunk_ends[:-1]),
        ),
        ("page size 64", lambda c: c.page_size == 64),
        ("an odd page size", lambda c: c.page_size % 2 == 1 and c.page_size > 1),
        ("an fp8_e4m3 KV cache", lambda c: c.kv_cache_dtype == "fp8_e4m3"),
        ("an mxfp8 KV cache (F4's input)", lambda c: c.kv_cache_dtype == "mxfp8"),
        ("an mxfp8 KV cache past a decode prefix", lambda c: c.kv_cache_dtype == "mxfp8" and c.decode_prefix > 0),
        ("an mxfp8 rebootstrap past the prompt's pages", _mxfp8_past_prompt),
        ("a DSA pool past a decode prefix", lambda c: c.kv_pool == "dsa" and c.decode_prefix > 0),
        ("a hybrid linear pool at page size 1", lambda c: c.kv_pool == "mamba" and c.page_size == 1),
        ("a hybrid linear pool on fp8_e4m3", lambda c: c.kv_pool == "mamba" and c.kv_cache_dtype == "fp8_e4m3"),
        (
            "a hybrid linear DSA pool, one slot each side (F6's input)",
            lambda c: c.kv_pool == "mamba_dsa" and c.prefill_mamba_slot != c.decode_mamba_slot,
        ),
        (
            "GLM-5.3-Flash's compressed indexer on 256-token pages",
            lambda c: c.dsa_index_kpool == 4 and c.page_size == 256 and c.length % 4 > 0,
        ),
        ("a Mamba slot past 16 request rows", lambda c: c.mamba and c.decode_mamba_slot > 17),
        ("a hybrid linear rebootstrap", lambda c: c.mamba and c.rebootstrap and c.outputs > 0),
        (
            "a QSA pool past a decode prefix, rows apart",
            lambda c: c.kv_pool == "mamba_qsa" and c.decode_prefix > 0 and c.prefill_row != c.decode_row,
        ),
        (
            "a QSA pool whose Mamba slot passes the request rows",
            lambda c: c.kv_pool == "mamba_qsa" and c.prefill_mamba_slot > 16,
        ),
        ("a MiniMax-M3 pool at page size 128 (T22's input)", lambda c: c.kv_pool == "minimax" and c.page_size == 128),
        (
            "a MiniMax-M3 pool on fp8_e4m3 past a decode prefix, other page size",
            lambda c: (
                c.kv_pool == "minimax"
                and c.kv_cache_dtype == "fp8_e4m3"
                and c.decode_prefix > 0
                and c.page_size not in (1, 128)
            ),
        ),
        ("a MiniMax-M3 rebootstrap", lambda c: c.kv_pool == "minimax" and c.rebootstrap and c.outputs > 0),
    ],
)
def test_checksum_cases_reach(what: str, reached: Any) -> None:
    """Each input X2's defects live in is drawn (a strategy that never reaches one hides the defect there)."""
    find(checksum_cases(), reached, settings=settings(max_examples=2000, database=None))


def test_checksum_cases_keep_to_their_pools() -> None:
    """``kv_pools`` bounds what is drawn; a hybrid linear pool past 64 keeps a page size dividing the track
    interval."""
    find(checksum_cases(kv_pools=("mamba",), max_page_size=512), lambda c: c.page_size == 256,
         settings=settings(max_examples=2000, database=None))  # fmt: skip
    with pytest.raises(NoSuchExample):
        find(checksum_cases(kv_pools=("dsa",)), lambda c: c.kv_pool != "dsa" or c.page_size != 64,
             settings=settings(max_examples=200, database=None))  # fmt: skip


@pytest.mark.parametrize(
    ("what", "reached"),
    [
        ("a PP pass that admits a request no earlier pass saw ready (the consensus's good list)",
         lambda c: c.pp_consensus and any(r.consensus == "good" and not r.bootstrapped for r in c.requests)),
        ("a PP pass failing a live request another stage failed (the consensus's bad list)",
         lambda c: c.pp_consensus and any(r.consensus == "bad" and not r.aborted and r.receiver_failed is None
                                          and r.bootstrapped for r in c.requests)),
        ("a PP pass that leaves an aborted request outside the consensus queued",
         lambda c: c.pp_consensus and any(r.aborted and r.consensus is None for r in c.requests)),
        ("a PP pass with an adapter loaded only in the other microbatch that turns a request away",
         lambda c: c.pp_consensus and c.max_loras is not None and any(
             r.lora not in {lo for _, lo in c.running} | set(c.microbatch_loras)
             and len({lo for _, lo in c.running} | {r.lora}) <= c.max_loras
             < len({lo for _, lo in c.running} | set(c.microbatch_loras) | {r.lora}) for r in c.requests)),
        ("a PP pass whose good list holds a receiver failed since",
         lambda c: c.pp_consensus and any(r.receiver_failed and r.consensus == "good" for r in c.requests)),
    ],
)  # fmt: skip
def test_decode_queues_reach_the_pp_consensus(what: str, reached: Any) -> None:
    """The PP form of the pass (0.5.7 on) is drawn with each verdict the consensus can give against this stage's own
    state: a strategy that drew only consensus lists agreeing with the receivers could not tell a pass that polls
    them (XQ36) from one that takes the consensus."""
    find(decode_queues(), reached, settings=settings(max_examples=3000, database=None))


def test_decode_queues_reach_where_the_swa_budget_forms_part() -> None:
    """From 0.5.19 the SWA budget is re-read after each admission and keeps back headroom only as far as the windows
    can still grow; to 0.5.18 it is read once and charged each admission's headroom. The strategy reaches passes the
    two forms decide differently, and one where the re-read keeping back no headroom for the admitted requests (XQ31)
    admits a request the release turns away - a uniform draw reached neither in 3,000 passes."""
    from pdverify.mutants.queue import _SwaHeadroomFree
    from pdverify.oracle.decode_queue import expected_pass

    def forms_part(c: Any) -> bool:
        return (
            c.swa_token_budget is not None
            and expected_pass(c).admitted != expected_pass(c, swa_budget_reread=False).admitted
        )

    def xq31_seen(c: Any) -> bool:
        return (
            c.swa_free_pages is not None
            and list(_SwaHeadroomFree(c, "cpu").run().admitted) != expected_pass(c).admitted
        )

    many = settings(max_examples=3000, database=None)
    find(decode_queues(), forms_part, settings=many)
    find(decode_queues(), xq31_seen, settings=many)


@given(decode_queues())
@settings(max_examples=200, database=None)
def test_decode_queues_share_prefix_pages_within_an_adapter_only(case: Any) -> None:
    """The decode radix cache keys a prefix by the request's adapter too (``Req.extra_key`` holds the LoRA id): the
    requests of one adapter hold the start of one common prefix, and no page is cached under two adapters."""
    owner: dict[int, Any] = {}
    for r in case.requests:
        for page in r.prefix_pages:
            assert owner.setdefault(page, r.lora) == r.lora, f"page {page} cached for {owner[page]!r} and {r.lora!r}"
    for lora in {r.lora for r in case.requests}:
        chains = sorted((r.prefix_pages for r in case.requests if r.lora == lora), key=len)
        assert all(chains[-1][: len(p)] == p for p in chains), f"adapter {lora!r}'s prefixes {chains} are not one chain"


def test_decode_queues_reach_two_locks_on_one_page_at_the_budget() -> None:
    """The decode radix cache's budget loses a page some lock holds once, however many locks hold it. The strategy
    reaches a pass where counting it once per lock (XQ42) turns away a request the release admits - 0 to 1 draws in
    1,000 radix passes before its shared-lock boundary, 3 to 4 with it."""
    from pdverify.mutants.queue import _LockedPagesPerLock
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.properties.releases import bind_release

    def xq42_seen(c: Any) -> bool:
        return c.radix and list(_LockedPagesPerLock(c, "cpu").run().admitted) != expected_pass(c).admitted

    bind_release("0.5.23")
    try:
        find(decode_queues(), xq42_seen, settings=settings(max_examples=4000, database=None))
    finally:
        bind_release(None)


@pytest.mark.parametrize("release", ["0.5.7", "0.5.16"])
def test_decode_queues_draw_both_pp_forms_where_the_step_flattens_the_consensus(release: str) -> None:
    """0.5.7-0.5.16 have the decode PP loop (#14945): its step is given the stages' consensus (drawn, and checked
    against it: #31869 is a fix, no boundary) and hands the pass ``rids_to_check`` (drawn as well: a caller of those
    releases makes it)."""
    from pdverify.properties.releases import bind_release

    bind_release(release)
    try:
        find(decode_queues(), lambda c: c.pp_consensus, settings=settings(max_examples=300, database=None))
        find(decode_queues(), lambda c: c.restrict, settings=settings(max_examples=300, database=None))
    finally:
        bind_release(None)


def test_decode_queues_draw_no_pp_pass_before_the_pp_loop() -> None:
    """0.5.6.post2 has no decode PP event loop: neither a PP step nor a restricted pass is drawn."""
    from pdverify.properties.releases import bind_release

    bind_release("0.5.6.post2")
    try:
        for form in (lambda c: c.pp_consensus, lambda c: c.restrict):
            with pytest.raises(NoSuchExample):
                find(decode_queues(), form, settings=settings(max_examples=300, database=None))
    finally:
        bind_release(None)


@pytest.mark.parametrize("release", ["0.5.17", "0.5.23"])
def test_decode_queues_draw_no_rids_to_check_pass_where_no_caller_makes_one(release: str) -> None:
    """From 0.5.17 no caller passes ``rids_to_check`` (#31869: the PP loop passes the consensus): no restricted pass
    is drawn, the PP pass is, and a restricted explicit example is outside the release's domain. The port, with no
    release, keeps the argument its signature takes."""
    from pdverify.properties.releases import bind_release, features_lacking, release_features
    from pdverify.properties.test_decode_queue import EXAMPLES

    restricted = [case for case in EXAMPLES if case.restrict]
    assert len(restricted) == 2, "the queue properties' explicit rids_to_check examples"
    for case in restricted:
        assert features_lacking([case], release_features("0.5.16")) == []
        assert features_lacking([case], release_features(None)) == []
        assert features_lacking([case], release_features("0.5.24.dev0+main")) == ["rids_to_check"]
        assert features_lacking([case], release_features(release)) == ["rids_to_check"]
    bind_release(release)
    try:
        with pytest.raises(NoSuchExample):
            find(decode_queues(), lambda c: c.restrict, settings=settings(max_examples=300, database=None))
        find(decode_queues(), lambda c: c.pp_consensus, settings=settings(max_examples=300, database=None))
    finally:
        bind_release(None)


def test_decode_cases_reach_a_shortfall_ending_inside_a_cached_sequence() -> None:
    """D3's whole-leaf eviction is drawn: the pages the request lacks end inside a cached sequence of several pages
    (the tree then frees more than the shortfall); a strategy that drew one-page leaves only hides XD12."""
    from pdverify.strategies import decode_cases

    def inside(c: Any) -> bool:
        short = -(-c.fill_len // c.page_size) - c.l1_prefix // c.page_size - len(c.free_pages)
        ends = [sum(c.evictable_leaves[: k + 1]) for k in range(len(c.evictable_leaves))]
        leaves = zip(ends, c.evictable_leaves, strict=True)
        return c.decode_prefix > 0 and short > 0 and any(e > short > e - n for e, n in leaves)

    find(decode_cases(), inside, settings=settings(max_examples=3000, database=None))


@pytest.mark.parametrize(
    ("what", "reached"),
    [
        (
            "an SWA window read through prefill's own SWA pool",
            lambda c: c.swa_pages is not None and "SWA" in c.state_types,
        ),
        ("a BLOCK_SCALE_SWA list through it", lambda c: c.swa_pages is not None and "BLOCK_SCALE_SWA" in c.state_types),
        ("released SWA pages before the window", lambda c: c.swa_pages is not None and 0 in c.swa_pages),
        (
            "an SWA map that moves a page of the window",
            lambda c: (
                c.swa_pages is not None
                and any(
                    c.swa_pages[p // c.page_size] != c.row[p] // c.page_size
                    for p in range(max(0, c.length - c.window), c.length)
                )
            ),
        ),
        ("an SWA map on a unified (translated) pool", lambda c: c.swa_pages is not None and c.translation is not None),
    ],
)
def test_prefill_cases_reach_the_swa_pool(what: str, reached: Any) -> None:
    """Prefill's SWA lists are drawn through an SWA pool of its own: a map that differs from the full pool's pages
    inside the window (where an untranslated list is wrong), released pages before it, on a unified pool too."""
    find(prefill_cases(), reached, settings=settings(max_examples=2000, database=None))


@settings(max_examples=60, database=None)
@given(pair=pd_exchanges())
def test_pd_exchanges_give_prefill_an_swa_pool_with_every_swa_list(pair: Any) -> None:
    """Prefill's side of an exchange with an SWA window list always reads it through its own SWA pool."""
    pre, _ = pair
    assert (pre.swa_pages is not None) == any(k in ("SWA", "BLOCK_SCALE_SWA") for k in pre.state_types)


@pytest.mark.parametrize(
    ("what", "reached"),
    [
        ("a server started with --skip-tokenizer-init, a request asking for min_new_tokens",
         lambda b: b.skip_tokenizer_init and any(r.sampling.min_new_tokens > 0 for r in b.reqs)),
        ("a server started with --skip-tokenizer-init, no request asking for min_new_tokens",
         lambda b: b.skip_tokenizer_init and b.reqs and all(r.sampling.min_new_tokens == 0 for r in b.reqs)),
        ("a request asking for min_new_tokens that finishes on a model eos id only the model configuration names",
         lambda b: any(r.sampling.min_new_tokens > 0 and set(b.model_eos_token_ids) - set(r.sampling.stop_token_ids
                                                                                         or []) - {b.eos_token_id}
                       for r in b.reqs) and b.eos_token_id is not None),
        ("the model configuration's eos ids the tokenizer's own",
         lambda b: b.eos_token_id is not None and b.model_eos_token_ids == (b.eos_token_id,)),
        ("deterministic inference and a seed sent as a string",
         lambda b: b.enable_deterministic_inference and any(isinstance(r.sampling.sampling_seed, str) for r in b.reqs)),
        ("a stop id past the vocabulary in one request, min_new_tokens asked by another, a tokenizer (F7)",
         lambda b: not b.skip_tokenizer_init and any(r.sampling.min_new_tokens > 0 and not r.sampling.stop_token_ids
                                                     for r in b.reqs)
         and any(t > b.vocab_size for r in b.reqs for t in r.sampling.stop_token_ids or [])),
        ("a negative stop id beside a request asking for min_new_tokens",
         lambda b: any(r.sampling.min_new_tokens > 0 for r in b.reqs)
         and any(t < 0 for r in b.reqs for t in r.sampling.stop_token_ids or [])),
        ("a tokenizer with an additional stop token, a request asking for min_new_tokens",
         lambda b: b.additional_stop_token_ids and any(r.sampling.min_new_tokens > 0 for r in b.reqs)),
        ("the padding id vocab_size as a stop id",
         lambda b: any(b.vocab_size in (r.sampling.stop_token_ids or []) for r in b.reqs)),
        ("a tokenizer without eos, a request asking for min_new_tokens",
         lambda b: not b.skip_tokenizer_init and b.eos_token_id is None
         and any(r.sampling.min_new_tokens > 0 for r in b.reqs)),
    ],
)  # fmt: skip
def test_batches_reach_a_server_without_a_tokenizer(what: str, reached: Any) -> None:
    """The decode server's tokenizer is drawn in its three forms the penalizer reads differently: one with an eos,
    one without (T25), and none at all (``--skip-tokenizer-init``, T27); and the model configuration's eos ids,
    the tokenizer's own or ids of their own (T28): a strategy that always handed requests a tokenizer could not reach
    T27, nor check that a release refuses what needs one, and one without model eos ids could not reach T28."""
    find(batches(), reached, settings=settings(max_examples=2000, database=None))


def test_stop_ids_outside_the_vocabulary_are_drawn_last() -> None:
    """One stop list in eight gains an id outside the vocabulary (``vocab_size``, one past it, a far one, -1), drawn
    after everything else: the settings drawn from a seed are the same with the stray taken off, and most stop lists
    carry none."""
    import random

    from pdverify.strategies.requests import sampling_settings

    lists = stray = 0
    for seed in range(4000):
        got = sampling_settings(random.Random(seed))
        if got.stop_token_ids is None:
            continue
        lists += 1
        outside = [t for t in got.stop_token_ids if not 0 <= t < 32]
        assert len(outside) <= 1 and got.stop_token_ids[: len(got.stop_token_ids) - len(outside)] == [
            t for t in got.stop_token_ids if 0 <= t < 32
        ], "the stray is appended last"
        stray += bool(outside)
    assert lists > 800 and 0.08 < stray / lists < 0.17, (lists, stray)
