"""The KV pools a PD server builds, as the exchange units see them: the state types each registers for the transfer.

SGLang registers a pool's state components once, in ``setup_state_kv_args`` (``disaggregation/utils.py``, 0.5.23
lines 1462-1870), by the pool's type: the state lists a send carries are exactly those components, in that order. A
request's state types are therefore never an arbitrary set: they are one pool's registration. Some pools also fix
the page size the server runs them at. ``STATE_POOLS`` lists them, each registration projected onto the state types
the exchange model covers (``DECODE_STATE_TYPES``: the Mamba state, QSA's pending ring and the DSA kpool tail are
request-row state the exchange does not model); the strategies draw a pool and take its registration and page size.

``tests/test_sglang_pools.py`` (conformance environment) builds SGLang's own pools and checks that its
``setup_state_kv_args`` registers, for each pool it can build on CPU, exactly what the entry says.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdverify.model.exchange import DECODE_STATE_TYPES, STATE_TYPES


@dataclass(frozen=True)
class StatePool:
    """A KV pool: the state types it registers (``setup_state_kv_args``' order, the exchange's types only), the page
    sizes the server runs it at (None: any), and where SGLang says so."""

    name: str
    state_types: tuple[str, ...]
    page_sizes: tuple[int, ...] | None
    source: str
    feature: str | None = None
    """The input feature (``pdverify.properties.releases.FEATURES``) a release needs to register the pool this way,
    beyond its state types (None: its state types suffice)."""

    def __post_init__(self) -> None:
        unknown = set(self.state_types) - set(DECODE_STATE_TYPES)
        if unknown:
            raise ValueError(f"pool {self.name!r}: unknown state types {sorted(unknown)}")
        if self.page_sizes is not None and (not self.page_sizes or min(self.page_sizes) < 1):
            raise ValueError(f"pool {self.name!r}: page_sizes must be None (any) or page sizes >= 1")

    @property
    def prefill_types(self) -> tuple[str, ...]:
        """The registration as prefill's model sees it: without DeepSeek-V4's request state, which it does not
        cover."""
        return tuple(k for k in self.state_types if k in STATE_TYPES)

    @property
    def hybrid_swa(self) -> bool:
        """Whether this is a hybrid SWA model's pool (an SWA buffer besides the full one: ``SWAKVPool``,
        DeepSeek-V4's)."""
        return "SWA" in self.state_types

    @property
    def fixed_page_size(self) -> bool:
        """Whether the server runs this pool at given page sizes only."""
        return self.page_sizes is not None

    def accepts(self, page_size: int) -> bool:
        """Whether the server runs this pool at ``page_size``."""
        return self.page_sizes is None or page_size in self.page_sizes


DSV4_PAGE_SIZES = (256,)
"""DeepSeek-V4's page size: its model override sets 256 whatever ``--page-size`` says (0.5.23
``arg_groups/model_overrides/deepseek_v4.py:51-61``; 128 on NPU, not modelled) and its KV configurator asserts it
(``kv_cache_configurator.py:2068-2070``); 256 since 0.5.15 (``arg_groups/overrides.py:694``)."""

STATE_POOLS: tuple[StatePool, ...] = (
    StatePool("mha", (), None, "MHATokenToKVPool (a dense model): no state component"),
    StatePool(
        "mxfp8",
        ("BLOCK_SCALE",),
        (128,),
        "MHATokenToKVPoolMXFP8 (--kv-cache-dtype mxfp8): its block scales (utils.py:1513-1518); written only at page "
        "size 128 (mxfp8_sf_interleaved = page_size == 128, asserted by set_kv_buffer)",
    ),
    StatePool("swa", ("SWA",), None, "SWAKVPool (a hybrid SWA model): its SWA buffer (utils.py:1547-1550)"),
    StatePool(
        "swa_mxfp8",
        ("SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA"),
        (128,),
        "SWAKVPool over MXFP8 sub-pools: the SWA buffer, then each sub-pool's block scales, full then SWA "
        "(utils.py:1561-1570); page size 128 as mxfp8",
    ),
    StatePool(
        "dsa",
        ("DSA",),
        (64, 256),
        "DSATokenToKVPool (DeepSeek-V3.2, GLM-5; alike inside a hybrid linear DSA pool, after the Mamba state): the "
        "indexer keys (utils.py:1702-1735, 1629-1639); DSATokenToKVPool asserts page_size // index_kpool == 64 "
        "(index_kpool 1 or 4)",
    ),
    StatePool(
        "qsa",
        ("QSA_COMPRESSED",),
        (64,),
        "QSATokenToKVPool (Qwen4-Exp, a hybrid linear pool): the compressed indexer state after the Mamba state and "
        "the pending ring (utils.py:1640-1701); the server sets page size 64 for compressed QSA (qwen4_exp.py)",
    ),
    StatePool(
        "minimax",
        ("MINIMAX_INDEX_K", "MINIMAX_DENSE_KV"),
        None,
        "MiniMaxSparseKVPool with K-only sparse and dense layers (utils.py:1520-1541); an explicit --page-size stands",
    ),
    StatePool(
        "minimax_sparse",
        ("MINIMAX_INDEX_K",),
        None,
        "an all-sparse MiniMaxSparseKVPool: no dense component is registered (utils.py:1532-1534)",
    ),
    StatePool(
        "dsv4",
        ("SWA", "DSV4_REQUEST_STATE"),
        DSV4_PAGE_SIZES,
        "DeepSeekV4TokenToKVPool: its SWA state, then the request-scoped compress state (utils.py:1547-1550, "
        "1587-1597)",
    ),
    StatePool(
        "dsv4_unified",
        ("SWA", "SWA_RING", "DSV4_REQUEST_STATE"),
        DSV4_PAGE_SIZES,
        "DeepSeekV4TokenToKVPool on the unified KV layout (ROCm: SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton, "
        "unified_kv_gate.py:12-15): the SWA ring in the unified buffers besides (utils.py:1573-1586)",
    ),
    StatePool(
        "dsv4_nextn",
        ("SWA", "DSV4_REQUEST_STATE", "SWA"),
        DSV4_PAGE_SIZES,
        "DeepSeek-V4 with its NextN (EAGLE) draft pool: the draft's SWA, sharing the target's SWA indices "
        "(utils.py:1775-1842); no SWA valid-from outside DSpark (deepseek_v4_memory_pool.py:1245-1258)",
        "dsv4_draft_state",
    ),
    StatePool(
        "dsv4_dspark",
        ("SWA", "DSV4_REQUEST_STATE", "SWA", "REQUEST_ROW"),
        DSV4_PAGE_SIZES,
        "DeepSeek-V4 with a DSpark draft (--speculative-algorithm DSPARK): the draft's SWA and its SWA valid-from, "
        "one item per request row (utils.py:1842-1857, deepseek_v4_memory_pool.py:1245-1258)",
        "dsv4_draft_state",
    ),
    StatePool(
        "dsv4_unified_nextn",
        ("SWA", "SWA_RING", "DSV4_REQUEST_STATE", "SWA_RING"),
        DSV4_PAGE_SIZES,
        "DeepSeek-V4 with its draft on the unified KV layout: the draft's SWA ring (the target's geometry, "
        "utils.py:1812); the unified draft has no SWA pool, so never an SWA valid-from",
        "dsv4_draft_state",
    ),
)
"""Every pool, its registration as of SGLang 0.5.23. A release registers the types it has (``StateType``): a pool
with a type the release does not register is not built there."""


def pool_named(name: str) -> StatePool:
    """The pool ``name`` of ``STATE_POOLS`` (``KeyError`` naming the known ones otherwise)."""
    for pool in STATE_POOLS:
        if pool.name == name:
            return pool
    raise KeyError(f"no pool {name!r} (known: {', '.join(p.name for p in STATE_POOLS)})")
