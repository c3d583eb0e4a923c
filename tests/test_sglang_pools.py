"""The pool catalogue the exchange strategies draw from (``pdverify.model.pools.STATE_POOLS``) is SGLang's own
registration: for every pool SGLang builds on CPU here, its ``setup_state_kv_args`` registers exactly the entry's state
types, in its order (projected onto the types the exchange models: the Mamba state, QSA's pending ring and the DSA
kpool tail are request-row state it does not cover). The pools are built by X2's builders (SGLang's own classes:
``MHATokenToKVPool``, ``MHATokenToKVPoolMXFP8``, ``SWAKVPool``, ``DSATokenToKVPool``, ``HybridLinearKVPool``,
``QSATokenToKVPool``, ``MiniMaxSparseKVPool``). DeepSeek-V4's pools are SGLang's own ``DeepSeekV4TokenToKVPool``
(0.5.23), at its one page size, with the draft pool its KV configurator builds for NextN and DSpark (ratio 0, no
compressed caches, ``is_draft_worker``); the unified layout's ROCm-only gate (``is_unified_kv_triton``) is the one
thing set by hand. An all-sparse MiniMax pool is read from the source (``utils.py:1532-1534``), not built.

Runs in the conformance environment with SGLang 0.5.21 or later (X2's era); skipped elsewhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import find, settings

pytest.importorskip("sglang.srt.disaggregation.checksum", reason="needs SGLang 0.5.21+ (the conformance env)")

BUILT = {
    # catalogue pool -> (X2's kv_pool, --kv-cache-dtype, a sliding window)
    "mha": ("mha", "auto", False),
    "mxfp8": ("mha", "mxfp8", False),
    "swa": ("mha", "auto", True),
    "swa_mxfp8": ("mha", "mxfp8", True),
    "dsa": ("dsa", "auto", False),
    "qsa": ("mamba_qsa", "auto", False),
    "minimax": ("minimax", "auto", False),
}


def _registered(kv_pool: str, dtype: str, window: bool) -> tuple[tuple[str, ...], int]:
    """What SGLang's ``setup_state_kv_args`` registers for the pool X2 builds, projected onto the exchange's state
    types, and the page size it was built at."""
    from pdverify.model.exchange import DECODE_STATE_TYPES
    from pdverify.strategies import checksum_cases
    from pdverify.targets import sglang_checksum as x2

    case = find(
        checksum_cases(kv_pools=(kv_pool,), kv_cache_dtypes=(dtype,), max_page_size=128),
        lambda c: bool(c.sliding_window) == window and c.dsa_index_kpool == 1,
        settings=settings(max_examples=500, database=None),
    )
    with x2._single_rank():  # the parallel widths a DSA pool reads, as X2 publishes them
        engine = x2._engine(x2._modules(), case, x2._Buffers(), "prefill", case.prefill_row)
    names = {k.lower(): k for k in DECODE_STATE_TYPES} | {"c128_state": "DSV4_REQUEST_STATE"}
    return tuple(names[t] for t in engine.types if t in names), case.page_size


@pytest.mark.parametrize("name", sorted(BUILT))
def test_the_catalogue_is_what_sglang_registers(name: str) -> None:
    from pdverify.model.pools import pool_named

    pool = pool_named(name)
    kinds, page_size = _registered(*BUILT[name])
    assert kinds == pool.state_types, f"{name}: SGLang registers {kinds}, the catalogue says {pool.state_types}"
    assert pool.accepts(page_size), f"{name}: built at page size {page_size}, the catalogue says {pool.page_sizes}"


DSV4_BUILT = {
    # catalogue pool -> (the unified KV layout, the draft's --speculative-algorithm or None: no draft)
    "dsv4": (False, None),
    "dsv4_unified": (True, None),
    "dsv4_nextn": (False, "NEXTN"),
    "dsv4_dspark": (False, "DSPARK"),
    "dsv4_unified_nextn": (True, "NEXTN"),
}


def _dsv4_registered(unified: bool, draft_algorithm: str | None) -> tuple[tuple[str, ...], int]:
    """What SGLang's ``setup_state_kv_args`` registers for its own DeepSeek-V4 pool (and the NextN draft's, where a
    speculative algorithm is set), projected onto the exchange's state types, and the page size it was built at."""
    import contextlib
    from unittest import mock

    import torch

    dsv4 = pytest.importorskip("sglang.srt.mem_cache.deepseek_v4_memory_pool", reason="needs SGLang 0.5.23")
    if not hasattr(dsv4, "is_dspark_spec"):
        pytest.skip("DeepSeek-V4's pools are built here as of SGLang 0.5.23 (DSpark and REQUEST_ROW)")
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import setup_state_kv_args
    from sglang.srt.layers.attention.dsv4 import unified_kv_gate

    from pdverify.model.exchange import DECODE_STATE_TYPES
    from pdverify.model.pools import DSV4_PAGE_SIZES
    from pdverify.targets.sglang_context import context

    found = context("prefill")
    assert found is not None, "SGLang 0.5.23 has a runtime context"
    rc, ctx = found
    ps = DSV4_PAGE_SIZES[0]
    # the smallest pool SGLang accepts: 448 + 64 nope/rope dims are its 584-byte fp8 token (create_buffer asserts it)
    target = {"max_num_reqs": 2, "swa_size": 2 * ps, "c4_size": ps, "c128_size": 8, "c4_state_pool_size": 64,
              "c128_state_pool_size": 8, "page_size": ps, "swa_page_size": ps, "sliding_window": 128,
              "dtype": torch.float8_e4m3fn, "c4_state_dtype": torch.float32, "c128_state_dtype": torch.float32,
              "qk_nope_head_dim": 448, "qk_rope_head_dim": 64, "indexer_head_dim": 128, "layer_num": 3,
              "device": "cpu", "enable_memory_saver": False, "compression_ratios": [0, 4, 128],
              "kv_source_layers": [], "full_size": 4 * ps,
              "online_mtp_max_draft_tokens": 4 if draft_algorithm else 0}  # fmt: skip
    # the NextN draft as kv_cache_configurator._build_dsv4_kv_pool builds it: ratio 0, no compressed caches
    draft = {**target, "c4_size": 0, "c128_size": 0, "c4_state_pool_size": 0, "c128_state_pool_size": 0,
             "layer_num": 1, "compression_ratios": [0], "is_draft_worker": True}  # fmt: skip
    with contextlib.ExitStack() as stack:
        stack.enter_context(rc.use_context(ctx))
        if draft_algorithm:
            spec = {"speculative_algorithm": draft_algorithm, "speculative_num_draft_tokens": 4}
            stack.enter_context(rc.get_spec().override(**spec))
        # the unified layout is ROCm's (is_hip() and SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton)
        stack.enter_context(mock.patch.object(unified_kv_gate, "is_unified_kv_triton", lambda: unified))
        pool = dsv4.DeepSeekV4TokenToKVPool(**target)
        draft_pool = dsv4.DeepSeekV4TokenToKVPool(**draft) if draft_algorithm else None
        if draft_pool is not None and not unified:  # target and draft share the allocator's full-to-SWA map
            mapping = torch.zeros(5 * ps, dtype=torch.int64)
            pool.register_mapping(mapping)
            draft_pool.register_mapping(mapping)
        kv_args = KVArgs()
        setup_state_kv_args(kv_args, pool, draft_pool, total_kv_layers=3, req_to_token_pool=None)
    names = {k.lower(): k for k in DECODE_STATE_TYPES}
    return tuple(names[t.name.lower()] for t in kv_args.state_types if t.name.lower() in names), ps


@pytest.mark.parametrize("name", sorted(DSV4_BUILT))
def test_the_deepseek_v4_catalogue_is_what_sglang_registers(name: str) -> None:
    from pdverify.model.pools import pool_named

    pool = pool_named(name)
    kinds, page_size = _dsv4_registered(*DSV4_BUILT[name])
    assert kinds == pool.state_types, f"{name}: SGLang registers {kinds}, the catalogue says {pool.state_types}"
    assert pool.page_sizes == (page_size,), f"{name}: built at page size {page_size}, catalogue {pool.page_sizes}"


def test_every_pool_with_state_but_all_sparse_minimax_is_built() -> None:
    from pdverify.model.pools import STATE_POOLS

    unbuilt: set[Any] = {p.name for p in STATE_POOLS} - set(BUILT) - set(DSV4_BUILT)
    assert unbuilt == {"minimax_sparse"}, unbuilt
