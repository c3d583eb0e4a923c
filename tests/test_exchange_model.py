"""The scheduler-level cases reject inputs outside their contract with an error naming the argument."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pdverify.model.checksum import ChecksumCase
from pdverify.model.exchange import DecodeCase, PrefillCase
from pdverify.model.queue import DecodeQueueCase, QueuedRequest
from pdverify.model.sender import BootstrapCase, SenderCase

ROW = tuple(5 * 4 + i for i in range(4)) + tuple(2 * 4 + i for i in range(4))


def prefill(**kw: Any) -> PrefillCase:
    base: dict[str, Any] = {"page_size": 4, "length": 8, "decode_prefix": 4, "row": ROW, "chunk_ends": (8,)}
    return PrefillCase(**{**base, **kw})


def decode(**kw: Any) -> DecodeCase:
    base: dict[str, Any] = {"page_size": 4, "length": 8, "output_len": 1, "l1_row": (), "decode_prefix": 0,
                            "stale_row": (0,) * 12, "free_pages": (1, 2, 3)}  # fmt: skip
    return DecodeCase(**{**base, **kw})


def queue(**kw: Any) -> DecodeQueueCase:
    base: dict[str, Any] = {"page_size": 4, "requests": (QueuedRequest(5),), "free_pages": (1, 2, 3),
                            "metadata_buffers": 1, "request_rows": 1, "token_budget": 12}  # fmt: skip
    return DecodeQueueCase(**{**base, **kw})


def queued(**kw: Any) -> DecodeQueueCase:
    return queue(requests=(QueuedRequest(**{"length": 5, **kw}),))


@pytest.mark.parametrize(
    ("make", "kw", "message"),
    [
        (prefill, {"decode_prefix": 2}, "decode_prefix=2 must be page-aligned"),
        (prefill, {"decode_prefix": 12}, "decode_prefix=12 must be page-aligned and <= length"),
        (prefill, {"row": ROW[:5]}, "row has 5 locations"),
        (prefill, {"chunk_ends": (6,)}, "chunk_ends=(6,) must be non-decreasing and end at length"),
        (prefill, {"chunk_ends": (8, 4)}, "chunk_ends"),
        (prefill, {"dcp_max_tokens": 0}, "dcp_max_tokens must be >= 1, got 0"),
        (prefill, {"dcp_relayout": False}, "dcp_relayout=False needs dcp_max_tokens"),
        (prefill, {"chunked_prefill_size": 6}, "chunked_prefill_size=6 must be a positive multiple of page_size=4"),
        (prefill, {"chunked_prefill_size": 0}, "chunked_prefill_size"),
        (prefill, {"early_prefix": 8}, "early_prefix=8 must be in [0, length - 1]"),
        (prefill, {"translation": (0, 5)}, "translation has 2 entries but the row holds virtual page"),
        (prefill, {"translation": (0, 0, 7, 0, 0, 7)}, "distinct physical pages >= 1"),
        (prefill, {"translation": (0,) * 30}, "distinct physical pages >= 1"),
        (prefill, {"state_types": ("MAMBA",)}, "unknown state types ['MAMBA']"),
        (prefill, {"swa_pages": (3, 4)}, "swa_pages needs an SWA window state type"),
        (prefill, {"swa_pages": (3,), "state_types": ("SWA",)}, "swa_pages has 1 entries, expected one per page"),
        (prefill, {"swa_pages": (3, 3), "state_types": ("SWA",)}, "distinct SWA pages >= 1"),
        (prefill, {"swa_pages": (-1, 3), "state_types": ("SWA",)}, "distinct SWA pages >= 1"),
        # L - W = 2: page 0 is still in the sliding window
        (prefill, {"swa_pages": (0, 3), "state_types": ("SWA",), "window": 6}, "releases a page of the sliding"),
        (prefill, {"window": 0}, "window"),
        (prefill, {"window": 9, "ring_size": 8}, "ring_size=8 must be >= window=9"),
        (prefill, {"rank_split": ("tp", 0, 2)}, "rank_split=('tp', 0, 2) must be (mode, rank, size)"),
        (prefill, {"deferred_room": "stale"}, "deferred_room='stale' must be None or one of"),
        (prefill, {"attention_dp": (1, 0, "query", False)}, "attention_dp=(1, 0, 'query', False) must be"),
        (prefill, {"attention_dp": (2, 2, "query", False)}, "0 <= rank < ranks"),
        (prefill, {"attention_dp": (2, 0, "random", False)}, "method in"),
        (prefill, {"bootstrap_room": -1}, "bootstrap_room"),
        (prefill, {"buffer_waits": -1}, "buffer_waits"),
        (prefill, {"host_hit_length": 4}, "host_hit_length=4 needs an early prefix"),
        (prefill, {"host_hit_length": 20, "early_prefix": 4}, "below length"),
        (prefill, {"early_send_blocked": "busy"}, "early_send_blocked='busy' must be None"),
        (prefill, {"rank_split": ("kv_shard", 2, 2)}, "0 <= rank < size"),
        (prefill, {"rank_split": ("cp_all", 0, 1)}, "size >= 2"),
        (prefill, {"pp_consensus": "ready"}, "pp_consensus='ready' must be None or one of ('good', 'bad')"),
        (prefill, {"pp_consensus": "bad", "deferred_room": "fresh"}, "with deferred_room: SGLang's server refuses"),
        (prefill, {"pp_consensus": "good", "translation": tuple(range(100, 130))}, "'good' with translation"),
        (prefill, {"pp_consensus": "good", "held_buffer": True}, "with held_buffer"),
        (prefill, {"pp_consensus": "bad", "rank_split": ("kv_shard", 0, 2)}, "with rank_split"),
        # follow_room, unplaced, rank 1 of 2 where room 4242 % 2 = 0: the sender fails at creation
        (prefill, {"pp_consensus": "good", "attention_dp": (2, 1, "follow_room", False)}, "lists the request bad"),
        (decode, {"length": 0}, "length"),
        (decode, {"decode_prefix": 2}, "must be page-aligned"),
        (decode, {"l1_row": (20, 21, 22, 23), "decode_prefix": 0}, "need l1 prefix 4 <= decode_prefix=0"),
        (decode, {"stale_row": (0,) * 5}, "stale_row must cover fill_len + page_size = 12"),
        (decode, {"free_pages": (0, 1)}, "free_pages must be distinct pages >= 1"),
        (decode, {"state_types": ("MAMBA",)}, "unknown state types"),
        (decode, {"window": 9, "ring_size": 8}, "ring_size=8 must be >= window=9"),
        (decode, {"page_size": 1, "swa_free_pages": (1,), "stale_row": (0,) * 12}, "needs page_size > 1"),
        (decode, {"output_len": 2, "swa_free_pages": (1, 2, 3), "stale_row": (0,) * 13}, "output_len=2 must be 0 or 1"),
        (decode, {"swa_free_pages": (0, 1)}, "swa_free_pages must be distinct pages >= 1"),
        (
            decode,
            {"swa_free_pages": (5, 6), "decode_prefix": 4, "length": 9, "stale_row": (0,) * 13},
            "swa_free_pages with a HiCache host hit (decode_prefix=4 > l1 prefix 0)",
        ),
        (decode, {"request_state": (128, False, 64)}, "request_state=(128, False, 64) is not a layout SGLang's"),
        (decode, {"evictable_pages": (1,), "decode_prefix": 4, "l1_row": (20, 21, 22, 23)}, "neither free nor the"),
        (decode, {"evictable_pages": (5,), "decode_prefix": 4, "l1_row": (20, 21, 22, 23)}, "neither free nor the"),
        (decode, {"evictable_pages": (9,)}, "evictable_pages need the radix cache"),
        (
            decode,
            {"evictable_pages": (7, 9), "evictable_leaves": (1, 2), "decode_prefix": 4, "l1_row": (20, 21, 22, 23)},
            "evictable_leaves=(1, 2) must be page counts >= 1 summing to the 2 evictable pages",
        ),
        (decode, {"swa_free_pages": ()}, "swa_free_pages hold fewer than the 4 tokens of the SWA span"),
        (decode, {"swa_tail": False}, "swa_tail=False describes a hybrid SWA pool's allocation: it needs swa_free"),
        (
            decode,
            {
                "swa_free_pages": (1,),
                "swa_tail": False,
                "decode_prefix": 4,
                "l1_row": (20, 21, 22, 23),
                "length": 9,
                "stale_row": (0,) * 13,
            },
            "swa_free_pages hold fewer than the 5 tokens of the SWA span",
        ),
        (
            decode,
            {"swa_free_pages": (1, 2), "decode_prefix": 8, "l1_row": tuple(range(40, 48))},
            "reaches into the SWA tail",
        ),
        (queue, {"requests": ()}, "requests must hold at least one queued request"),
        (queue, {"free_pages": (0, 1, 2)}, "free_pages must be distinct pages >= 1"),
        (queue, {"free_pages": (1, 1, 2)}, "free_pages must be distinct pages >= 1"),
        (queue, {"metadata_buffers": -1}, "metadata_buffers"),
        (queue, {"request_rows": -1}, "request_rows"),
        (queue, {"token_budget": 13}, "token_budget=13 exceeds the free pages' 12 tokens"),
        (queue, {"reserved_decode_tokens": -1}, "reserved_decode_tokens"),
        (queue, {"running": ((0, None),)}, "running tokens"),
        (queue, {"priority_order": "fifo"}, "priority_order must be None or one of"),
        (queue, {"max_loras": 0}, "max_loras"),
        (queue, {"allocation_policy": "late"}, "allocation_policy='late' must be one of"),
        (queue, {"allocation_policy": "prefill_complete", "radix": True}, "the server refuses it"),
        (queue, {"host_threshold": 1.5}, "must be fractions in [0, 1]"),
        (queue, {"pp_consensus": True, "restrict": True}, "a PP pass takes the consensus, never rids_to_check"),
        (queue, {"microbatch_loras": ("a",)}, "other microbatches run only in a PP pass"),
        (queued, {"consensus": "maybe"}, "consensus='maybe' must be None or one of ('good', 'bad')"),
        (queue, {"host_free_pages": (0,)}, "host_free_pages must be distinct pages >= 1"),
        (queue, {"host_reserved_tokens": -1}, "host_reserved_tokens"),
        (queue, {"host_threshold": 0.5, "radix": True}, "root-prefix binding is not modelled"),
        (queue, {"page_size": 1, "swa_free_pages": (1,), "token_budget": 3}, "needs page_size > 1"),
        (queue, {"swa_free_pages": (0,)}, "swa_free_pages must be distinct pages >= 1"),
        (queue, {"swa_free_pages": (8,), "window": 0}, "window"),
        (
            queue,
            {"requests": (QueuedRequest(5, prefix_pages=(9,)),), "radix": True, "swa_free_pages": (8,)},
            "prefix reaches into its SWA tail",
        ),
        (queue, {"swa_free_pages": (8,), "host_threshold": 0.5}, "host receive with an SWA pool is not modelled"),
        (queue, {"swa_free_pages": (8,)}, "swa_token_budget=None (an SWA budget beyond the free SWA buffer) needs"),
        (queue, {"swa_free_pages": (8,), "swa_token_budget": -1}, "swa_token_budget"),
        (queue, {"swa_free_pages": (8,), "swa_token_budget": 5}, "at most its 4 free tokens"),
        (queue, {"swa_token_budget": 0}, "swa_token_budget=0 needs an SWA pool and at most its 0 free tokens"),
        (queued, {"length": 0}, "length"),
        (queued, {"output_len": -1}, "output_len"),
        (queued, {"output_len": 2}, "output_len=2 must be 0 or 1 for a request that is not rebootstrapped"),
        (queued, {"max_new_tokens": 0}, "max_new_tokens"),
        (queued, {"max_new_tokens": 4097}, "requests[0].max_new_tokens must be <= 4096"),
        (queued, {"prefix_pages": (0,)}, "prefix_pages=(0,) must be distinct pages >= 1"),
        (queued, {"prefix_pages": (7, 8)}, "requests[0] has a prefix of 2 pages, more than its 5 tokens"),
        (queued, {"prefix_pages": (3,)}, "requests[0].prefix_pages must not be free pages"),
    ],
)
def test_out_of_contract_cases_are_rejected(make: Any, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**kw)


@pytest.mark.parametrize(
    ("make", "kw", "message"),
    [
        (queue, {"requests": ("r0",)}, "requests[0] must be a QueuedRequest"),
        (queue, {"running": ((4, 7),)}, "running lora must be an adapter name or None"),
        (queued, {"lora": 3}, "lora must be an adapter name or None"),
        (queue, {"microbatch_loras": (1,), "pp_consensus": True}, "microbatch_loras must hold adapter names or None"),
    ],
)
def test_wrongly_typed_queue_fields_are_rejected(make: Any, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        make(**kw)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SenderCase(2, 0, ()), "sends must hold at least the last send"),
        (lambda: SenderCase(3, 0, ((1, 2),)), "sends carry 2 pages, the sender expects 3"),
        (lambda: SenderCase(-1, 0, ((),)), "num_pages"),
        (lambda: BootstrapCase(4, 10, 2), "decode_prefix=2 must be page-aligned"),
        (lambda: BootstrapCase(4, 10, 12), "decode_prefix=12 must be page-aligned and in [0, length]"),
        (lambda: BootstrapCase(4, 10, 4, room=-1), "room"),
    ],
)
def test_sender_and_bootstrap_cases_reject_bad_input(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_in_contract_cases() -> None:
    staged = prefill(pp_consensus="bad", attention_dp=(2, 1, "follow_room", False), rank_split=("cp_all", 0, 2))
    assert staged.fails_at_creation and "prefill_pp" in staged.input_features()
    assert not prefill(attention_dp=(2, 1, "follow_room", True)).fails_at_creation
    assert "prefill_pp" not in prefill().input_features() and prefill(deferred_room="cancelled").fails_at_creation
    case = prefill(chunked_prefill_size=8, translation=tuple(range(100, 130)))
    assert case.grid == 8 and case.index_dtype == "int64" and prefill().grid is None
    d = decode(l1_row=(20, 21, 22, 23), decode_prefix=4, stale_row=(0,) * 12)
    assert d.l1_prefix == 4 and d.fill_len == 8
    assert decode(swa_free_pages=(3, 4)).swa_tail_len == 4 and decode().swa_tail_len == 0
    assert decode(swa_free_pages=(3, 4, 5), window=6, length=9, stale_row=(0,) * 13).swa_tail_len == 9
    # without tail pre-allocation the SWA span is the whole of [D, fill): at page size 1, with two outputs, a prefix
    whole = decode(page_size=1, swa_free_pages=tuple(range(1, 10)), swa_tail=False, output_len=2, stale_row=(0,) * 10)
    assert whole.swa_tail_len == 9 and "swa_tail_prealloc" not in whole.input_features()
    assert "swa_tail_prealloc" in decode(swa_free_pages=(3, 4)).input_features()
    held = decode(swa_free_pages=(3,), swa_tail=False, decode_prefix=4, l1_row=(20, 21, 22, 23), stale_row=(0,) * 12)
    assert held.swa_tail_len == 4 and {"swa_paged_pool", "swa_whole_paged"} <= set(held.input_features())
    q = queue(requests=(QueuedRequest(5, output_len=1), QueuedRequest(4, output_len=0)), running=((7, "a"), (2, None)))
    assert q.retractable_tokens == 9 and q.requests[0].fill_len == 5 and q.pages_for(0) == 2 and q.pages_for(1) == 1
    r = queue(requests=(QueuedRequest(9, output_len=1, prefix_pages=(7, 8)),), radix=True, free_pages=(1, 2, 3, 4))
    assert r.prefix_len(0) == 8 and r.pages_for(0) == 1 and r.requests[0].prefill_len == 9
    b = QueuedRequest(9, output_len=2, rebootstrap=True, prefix_pages=(7, 8))
    assert b.fill_len == b.prefill_len == 11
    assert queue(requests=(b,), radix=True, free_pages=(1, 2, 3, 4)).prefix_len(0) == 0


def checksum(**kw: Any) -> ChecksumCase:
    base: dict[str, Any] = {"page_size": 4, "prompt": 6, "prefill_pages": (5, 2), "decode_pages": (7, 3),
                            "chunk_ends": (4, 6)}  # fmt: skip
    return ChecksumCase(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"prompt": 0}, "prompt"),
        ({"decode_prefix": 2}, "decode_prefix=2 must be a multiple of page_size=4 within the prompt"),
        ({"decode_prefix": 8}, "decode_prefix=8 must be a multiple of page_size=4 within the prompt"),
        ({"rebootstrap": 1}, "rebootstrap must be a bool"),
        ({"outputs": 2, "prefill_pages": (5, 2), "chunk_ends": (8,)}, "outputs=2 without a rebootstrap"),
        ({"rebootstrap": True, "decode_prefix": 4}, "a rebootstrap has decode_prefix 0"),
        ({"chunk_ends": (6, 4)}, "chunk_ends=(6, 4) must increase within [1, 6] and end at n=6"),
        ({"chunk_ends": (5,)}, "chunk_ends=(5,) must increase"),
        ({"chunk_ends": ()}, "chunk_ends=() must increase"),
        ({"prefill_pages": (5,)}, "prefill_pages holds 1 pages; [0, 6) at page size 4 takes 2"),
        ({"decode_pages": (3, 3)}, "decode_pages must be distinct page ids >= 1"),
        ({"decode_pages": (0, 3)}, "decode_pages must be distinct page ids >= 1 (page 0 pads)"),
        ({"outputs": -1}, "outputs"),
        ({"kv_cache_dtype": "fp16"}, "kv_cache_dtype='fp16' must be one of"),
        ({"kv_cache_dtype": "mxfp8"}, "kv_cache_dtype='mxfp8' at page_size=4"),
        ({"prefill_swa_pages": (1, 2)}, "prefill_swa_pages=(1, 2) without a sliding window"),
        ({"sliding_window": 4, "prefill_swa_pages": (1,), "decode_swa_pages": (1, 2)}, "prefill_swa_pages holds 1 "),
        (
            {"sliding_window": 4, "prefill_swa_pages": (1, 2), "decode_swa_pages": (0, 2)},
            "decode_swa_pages must be distinct SWA page ids >= 1",
        ),
        ({"sliding_window": -1}, "sliding_window"),
        ({"kv_pool": "mla"}, "kv_pool='mla' must be one of"),
        (
            {"kv_pool": "mamba", "sliding_window": 4, "prefill_swa_pages": (1, 2), "decode_swa_pages": (1, 2)},
            "a sliding window and MXFP8 block scales are an MHA pool's",
        ),
        ({"kv_pool": "dsa"}, "kv_pool='dsa' at page_size=4"),
        (
            {
                "kv_pool": "dsa",
                "page_size": 64,
                "prefill_pages": (5,),
                "decode_pages": (7,),
                "chunk_ends": (6,),
                "kv_cache_dtype": "fp8_e4m3",
            },
            "a DSA pool keeps bfloat16 latents",
        ),
        (
            {
                "kv_pool": "dsa",
                "page_size": 256,
                "prefill_pages": (5,),
                "decode_pages": (7,),
                "chunk_ends": (6,),
                "dsa_index_kpool": 4,
            },
            "dsa_index_kpool=4 with kv_pool='dsa'",
        ),
        (
            {
                "kv_pool": "mamba_dsa",
                "page_size": 64,
                "prefill_pages": (5,),
                "decode_pages": (7,),
                "chunk_ends": (6,),
                "dsa_index_kpool": 2,
                "prefill_mamba_slot": 1,
                "decode_mamba_slot": 1,
            },
            "dsa_index_kpool=2",
        ),
        (
            {
                "kv_pool": "mamba_dsa",
                "page_size": 128,
                "prefill_pages": (5,),
                "decode_pages": (7,),
                "chunk_ends": (6,),
                "dsa_index_kpool": 4,
                "prefill_mamba_slot": 1,
                "decode_mamba_slot": 1,
            },
            "kv_pool='mamba_dsa' at page_size=128",
        ),
        (
            {
                "kv_pool": "mamba",
                "page_size": 3,
                "prefill_pages": (5, 2),
                "decode_pages": (7, 3),
                "prefill_mamba_slot": 1,
                "decode_mamba_slot": 1,
            },
            "divides --mamba-track-interval (256)",
        ),
        ({"kv_pool": "mamba", "prefill_mamba_slot": 1}, "decode_mamba_slot=0 with kv_pool='mamba'"),
        ({"kv_pool": "mamba", "prefill_mamba_slot": 25, "decode_mamba_slot": 1}, "prefill_mamba_slot=25 must be <= 24"),
        ({"prefill_mamba_slot": 2}, "prefill_mamba_slot=2 with kv_pool='mha'"),
        ({"kv_pool": "mamba", "prefill_mamba_slot": -1, "decode_mamba_slot": 1}, "prefill_mamba_slot"),
        (
            {
                "kv_pool": "mamba_qsa",
                "page_size": 2,
                "prefill_pages": (5, 2, 9),
                "decode_pages": (7, 3, 1),
                "prefill_mamba_slot": 1,
                "decode_mamba_slot": 1,
            },
            "kv_pool='mamba_qsa' at page_size=2",
        ),
        ({"decode_row": 0}, "decode_row must be >= 1"),
        ({"prefill_row": 16}, "prefill_row=16 must be <= 15"),
    ],
)
def test_checksum_cases_reject_bad_input(kw: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        checksum(**kw)


def test_a_rebootstrap_computes_prompt_and_kept_outputs() -> None:
    case = checksum(rebootstrap=True, outputs=3, prefill_pages=(5, 2, 9), decode_pages=(7, 3, 1), chunk_ends=(9,))
    assert case.length == 9 and case.input_features() == ("kv_checksum", "rebootstrap", "paged_transfer")
    assert checksum(decode_prefix=4).input_features() == ("kv_checksum", "decode_prefixes", "paged_transfer")
    mx = checksum(kv_cache_dtype="mxfp8", page_size=128, prefill_pages=(5,), decode_pages=(7,), chunk_ends=(6,))
    assert mx.block_scales and mx.input_features()[-1] == "state:BLOCK_SCALE" and not checksum().block_scales


def test_each_pool_registers_its_state_types() -> None:
    """A DSA pool its index keys, a hybrid linear pool its Mamba state, a hybrid linear DSA pool both - and, with a
    compressed indexer, its tail; a pooled indexer on 64 * kpool pages is 0.5.22's, packed into 64 before."""
    one = {"prefill_pages": (5,), "decode_pages": (7,), "chunk_ends": (6,)}
    slots = {"prefill_mamba_slot": 3, "decode_mamba_slot": 9}
    assert checksum(kv_pool="dsa", page_size=64, **one).state_types == ("dsa",)
    mamba = checksum(kv_pool="mamba", **slots)
    assert mamba.state_types == ("mamba",) and mamba.mamba and not mamba.dsa
    flash = checksum(kv_pool="mamba_dsa", page_size=256, dsa_index_kpool=4, **one, **slots)
    assert flash.state_types == ("mamba", "dsa", "dsa_tail") and flash.mamba and flash.dsa
    assert flash.input_features()[-1] == "dsa_kpool_pages"
    packed = checksum(kv_pool="mamba_dsa", page_size=64, dsa_index_kpool=4, **one, **slots)
    assert packed.input_features()[-1] == "dsa_kpool_packed"
    assert checksum(kv_pool="mamba_dsa", page_size=64, **one, **slots).state_types == ("mamba", "dsa")
    qsa = checksum(kv_pool="mamba_qsa", page_size=64, **one, **slots)
    assert qsa.state_types == ("mamba", "qsa_pending", "qsa_compressed") and qsa.mamba
    assert qsa.input_features()[-1] == "state:QSA_COMPRESSED"
