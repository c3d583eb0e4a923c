"""Strategies for the PD KV checksum end to end: ``checksum_cases``."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pdverify.model.checksum import (
    DSA_INDEX_KPOOLS,
    DSA_INDEX_PAGE,
    KV_CACHE_DTYPES,
    KV_POOLS,
    MAMBA_TRACK_INTERVAL,
    MAX_BOOTSTRAP_ROOM,
    MAX_MAMBA_SLOT,
    MAX_REQUEST_ROW,
    METADATA_BUFFER_SLOTS,
    MINIMAX_PAGE_SIZE,
    MXFP8_PAGE_SIZE,
    QSA_PAGE_SIZE,
    ChecksumCase,
)
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_choices, check_int
from pdverify.strategies.layouts import (
    boundary_length,
    boundary_prefix,
    draw_chunk_ends,
    page_size_list,
    pick_page_size,
)

ROOM_BOUNDARIES = (0, 1, 2**31 - 2, 2**31 - 1, MAX_BOOTSTRAP_ROOM)
"""The bootstrap rooms at the ends of the routers' ranges: 0 (in every router's range), the gRPC PD router's last
(``random_range(0..i32::MAX)``: ``2**31 - 2``) and one past it, the last of ``[0, 2**63)``."""


def checksum_cases(
    *,
    max_prompt: int = 160,
    max_outputs: int = 160,
    max_page_size: int = 64,
    max_chunks: int = 4,
    kv_cache_dtypes: tuple[str, ...] = KV_CACHE_DTYPES,
    hybrid_swa: bool = True,
    kv_pools: tuple[str, ...] = KV_POOLS,
) -> st.SearchStrategy[ChecksumCase]:
    """One request's KV handoff with the checksum on: a KV cache dtype of ``kv_cache_dtypes`` (shrinks to the first;
    ``mxfp8`` where the release registers block scales, always at its page size 128), a page size up to
    ``max_page_size`` (powers of two and odd sizes) for the others, a prompt of ``1..max_prompt`` tokens (half at a
    page boundary or one off it), then either a first handoff whose page-aligned decode prefix ``D`` lies anywhere
    in ``[0, prompt]`` (one time in four the largest), or - half the time, where the release has PD rebootstrap - a
    rebootstrap that kept ``0..max_outputs`` outputs (prompt + outputs half the time at a page boundary or one off
    it); prefill's chunk schedule (``1..max_chunks`` chunks); each side's row on its own fragmented distinct pages
    (never page 0). The first choice is a lean (``Choices.lean``): under one the lengths go to page boundaries and
    the rows to fragmented pages. Half the time where ``hybrid_swa``, a hybrid SWA model: a sliding window of
    ``1..n + page_size`` tokens (half at a page boundary or one off it) and each side's SWA pages. The pool is one of
    ``kv_pools`` (shrinks to the MHA pool, drawn half the time where it is asked for): an MHA pool as above; a DSA
    pool (bfloat16, page size 64); a hybrid linear pool (``auto`` or ``fp8_e4m3``, page size 1 or a power of two
    dividing the Mamba track interval) or a hybrid linear DSA pool (``index_kpool`` 1 at page size 64, or 4 with
    compression as GLM-5.3-Flash: at page size 256 where the release gives a pooled index whole pages, 64 before) or
    a hybrid linear QSA pool (Qwen4-Exp, at the page size 64 its server sets), each side's Mamba slot and request
    row drawn; or a MiniMax-M3 sparse pool (``auto`` or ``fp8_e4m3``, half the time at the page size 128 its server
    sets, else a power of two up to ``max_page_size``). The request's bootstrap room is half the time a boundary of
    the routers' ranges (``ROOM_BOUNDARIES``, 0 among them), else any room of ``[1, 2**63)``; its metadata slot on each
    side one of ``METADATA_BUFFER_SLOTS``, drawn apart."""
    check_int("max_prompt", max_prompt, minimum=1)
    check_int("max_outputs", max_outputs)
    check_int("max_page_size", max_page_size, minimum=1)
    check_int("max_chunks", max_chunks, minimum=1)
    check_choices("kv_cache_dtypes", kv_cache_dtypes, KV_CACHE_DTYPES)
    check_choices("kv_pools", kv_pools, KV_POOLS)
    if not isinstance(hybrid_swa, bool):
        raise InvalidArgument(f"hybrid_swa={hybrid_swa!r} must be a bool")
    return _checksum_cases(max_prompt=max_prompt, max_outputs=max_outputs, max_page_size=max_page_size,
                           max_chunks=max_chunks, kv_cache_dtypes=kv_cache_dtypes, hybrid_swa=hybrid_swa,
                           kv_pools=kv_pools)  # fmt: skip


@st.composite
def _checksum_cases(
    draw: st.DrawFn,
    *,
    max_prompt: int,
    max_outputs: int,
    max_page_size: int,
    max_chunks: int,
    kv_cache_dtypes: tuple[str, ...],
    hybrid_swa: bool,
    kv_pools: tuple[str, ...],
) -> ChecksumCase:
    c = Choices(draw)
    c.lean()
    pools = [p for p in kv_pools if p != "mamba_qsa" or DOMAIN.has("state:QSA_COMPRESSED")] or ["mha"]
    others = [p for p in pools if p != "mha"]
    # half the draws to the MHA pool where it is asked for: it has the most forms (three dtypes, a sliding window)
    pool = "mha" if "mha" in pools and (not others or not c.boolean()) else c.pick(others)
    kpool = c.pick(DSA_INDEX_KPOOLS) if pool == "mamba_dsa" else 1
    dtypes = [d for d in kv_cache_dtypes if d != "mxfp8" or DOMAIN.has("state:BLOCK_SCALE")] or ["auto"]
    if pool != "mha":  # the block scales are an MHA pool's; a DSA pool keeps bfloat16 latents
        dtypes = [d for d in dtypes if d != "mxfp8" and (d == "auto" or pool in ("mamba", "mamba_qsa", "minimax"))]
        dtypes = dtypes or ["auto"]
    dtype = c.pick(dtypes)
    if pool in ("dsa", "mamba_dsa"):  # a pooled index owns whole pages from 0.5.22; packed into 64 tokens before
        ps = DSA_INDEX_PAGE * kpool if DOMAIN.has("dsa_kpool_pages") else DSA_INDEX_PAGE
    elif dtype == "mxfp8":
        ps = MXFP8_PAGE_SIZE
    elif pool == "mamba_qsa":  # the server's page size for a compressed QSA indexer
        ps = QSA_PAGE_SIZE
    elif not DOMAIN.has("paged_transfer"):
        ps = 1
    elif pool == "minimax" and c.boolean():  # the page size MiniMax-M3's server sets; an explicit one stands
        ps = MINIMAX_PAGE_SIZE
    else:
        ps = pick_page_size(c, page_size_list(max_page_size, odd=pool == "mha"))
        ps = ps if pool == "mha" or MAMBA_TRACK_INTERVAL % ps == 0 else 1
    prompt = boundary_length(c, 1, max_prompt, ps)
    rebootstrap = DOMAIN.rebootstrap and c.boolean(lean=True)
    outputs = boundary_length(c, prompt, prompt + max_outputs, ps) - prompt if rebootstrap else 0
    d = boundary_prefix(c, prompt, ps) if DOMAIN.decode_prefix and not rebootstrap else 0
    n = prompt + outputs
    pages = -(-n // ps)
    prefill_pages = tuple(distinct_sample(c, 1, 4 * pages + 8, pages))
    decode_pages = tuple(distinct_sample(c, 1, 4 * pages + 8, pages))
    chunk_ends = tuple(draw_chunk_ends(c, n, max_chunks=max_chunks))
    window = 0
    swa: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    request: dict[str, int] = {}  # a hybrid linear pool's Mamba slots and request rows (other pools: the defaults)
    if pool.startswith("mamba"):
        request = {f"{side}_mamba_slot": c.integer(1, MAX_MAMBA_SLOT) for side in ("prefill", "decode")}
        request |= {f"{side}_row": c.integer(1, MAX_REQUEST_ROW) for side in ("prefill", "decode")}
    if pool == "mha" and hybrid_swa and (not d or DOMAIN.has("swa_decode_prefix")) and c.boolean():
        window = boundary_length(c, 1, n + ps, ps)  # within a page, across the prefix, past the whole request
        swa = (tuple(distinct_sample(c, 1, 2 * pages + 4, pages)), tuple(distinct_sample(c, 1, 2 * pages + 4, pages)))
    # the request's bootstrap room and metadata slots, drawn last so that the draws above stay what they were: half
    # the time a boundary of the routers' ranges (room 0 first: it shrinks there), else any room
    room = c.pick(ROOM_BOUNDARIES) if c.boolean() else c.integer(1, MAX_BOOTSTRAP_ROOM)
    slots = {f"{side}_aux_index": c.integer(0, METADATA_BUFFER_SLOTS - 1) for side in ("prefill", "decode")}
    return ChecksumCase(
        page_size=ps,
        prompt=prompt,
        prefill_pages=prefill_pages,
        decode_pages=decode_pages,
        chunk_ends=chunk_ends,
        decode_prefix=d,
        rebootstrap=rebootstrap,
        outputs=outputs,
        kv_cache_dtype=dtype,
        sliding_window=window,
        prefill_swa_pages=swa[0],
        decode_swa_pages=swa[1],
        kv_pool=pool,
        dsa_index_kpool=kpool,
        bootstrap_room=room,
        **slots,
        **request,
    )
