"""The pool catalogue the exchange strategies draw from (``pdverify.model.pools.STATE_POOLS``) is SGLang's own
registration: for every pool SGLang builds on CPU here, its ``setup_state_kv_args`` registers exactly the entry's state
types, in its order (projected onto the types the exchange models: the Mamba state, QSA's pending ring and the DSA
kpool tail are request-row state it does not cover). The pools are built by X2's builders (SGLang's own classes:
``MHATokenToKVPool``, ``MHATokenToKVPoolMXFP8``, ``SWAKVPool``, ``DSATokenToKVPool``, ``HybridLinearKVPool``,
``QSATokenToKVPool``, ``MiniMaxSparseKVPool``). DeepSeek-V4's pools and an all-sparse MiniMax pool are read from the
source (``utils.py:1547-1858``, ``1532-1534``), not built.

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


def test_every_pool_with_state_but_deepseek_v4_and_all_sparse_minimax_is_built() -> None:
    from pdverify.model.pools import STATE_POOLS

    unbuilt: set[Any] = {p.name for p in STATE_POOLS} - set(BUILT)
    assert unbuilt == {"minimax_sparse", "dsv4", "dsv4_unified", "dsv4_nextn", "dsv4_unified_nextn"}, unbuilt
