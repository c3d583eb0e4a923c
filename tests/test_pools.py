"""The pool catalogue: its entries are validated, and the exchange strategies draw a request's state types only as one
pool's registration, at a page size the server runs that pool at, and reach every pool."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import find, given, settings

from pdverify.model.exchange import DecodeCase, PrefillCase
from pdverify.model.pools import STATE_POOLS, StatePool, pool_named
from pdverify.strategies import decode_cases, pd_exchanges, prefill_cases

PREFILL_VIEWS: dict[tuple[str, ...], list[StatePool]] = {}
"""Each pool's registration as prefill's model sees it (no DeepSeek-V4 request state) -> the pools that give it (a
DeepSeek-V4 pool's view is an SWA pool's, at its own page size)."""
for _pool in STATE_POOLS:
    PREFILL_VIEWS.setdefault(_pool.prefill_types, []).append(_pool)
DECODE_VIEWS = {p.state_types: p for p in STATE_POOLS}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"state_types": ("MAMBA",)}, "pool 'x': unknown state types ['MAMBA']"),
        ({"page_sizes": ()}, "page_sizes must be None (any) or page sizes >= 1"),
        ({"page_sizes": (0, 64)}, "page_sizes must be None"),
    ],
)
def test_a_pool_outside_the_model_is_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        StatePool(**{"name": "x", "state_types": (), "page_sizes": None, "source": "", **kw})


def test_pools_are_named_and_say_their_page_sizes() -> None:
    assert pool_named("dsa").page_sizes == (64, 256) and pool_named("dsa").accepts(64)
    assert not pool_named("mxfp8").accepts(4) and pool_named("swa").accepts(7) and not pool_named("swa").fixed_page_size
    with pytest.raises(KeyError, match="no pool 'nsa' \\(known: mha, mxfp8"):
        pool_named("nsa")
    assert len({p.name for p in STATE_POOLS}) == len(STATE_POOLS)


@settings(max_examples=150, database=None)
@given(case=prefill_cases())
def test_prefill_state_types_are_one_pools_registration(case: PrefillCase) -> None:
    pools = PREFILL_VIEWS.get(case.state_types)
    assert pools, f"state types {case.state_types} are no pool's registration"
    assert any(p.accepts(case.page_size) for p in pools) or case.state_types == (), (pools, case.page_size)


@settings(max_examples=150, database=None)
@given(case=decode_cases())
def test_decode_state_types_are_one_pools_registration(case: DecodeCase) -> None:
    pool = DECODE_VIEWS.get(case.state_types)
    assert pool is not None, f"state types {case.state_types} are no pool's registration"
    assert pool.accepts(case.page_size), (pool.name, case.page_size)
    if "SWA" in pool.state_types:  # the server serves a hybrid SWA model's decode radix cache from the device only
        assert case.decode_prefix == case.l1_prefix, case


@pytest.mark.parametrize("name", [p.name for p in STATE_POOLS])
def test_decode_cases_reach_every_pool(name: str) -> None:
    pool = pool_named(name)
    find(
        decode_cases(), lambda c: c.state_types == pool.state_types, settings=settings(max_examples=3000, database=None)
    )


@pytest.mark.parametrize("view", sorted(PREFILL_VIEWS))
def test_prefill_cases_reach_every_pools_view(view: tuple[str, ...]) -> None:
    found = find(prefill_cases(), lambda c: c.state_types == view, settings=settings(max_examples=3000, database=None))
    assert any(p.accepts(found.page_size) for p in PREFILL_VIEWS[view])


def test_a_fixed_page_size_pool_is_drawn_past_a_page_with_a_decode_prefix_short_of_it() -> None:
    """DSA at page size 64: a prompt of several pages and a decode prefix below it, where the suffix list differs
    from the full one (a DSA suffix counted from 0 is wrong only there)."""
    find(prefill_cases(), lambda c: c.state_types == ("DSA",) and 0 < c.decode_prefix < c.length - c.page_size,
         settings=settings(max_examples=3000, database=None))  # fmt: skip


@settings(max_examples=80, database=None)
@given(pair=pd_exchanges())
def test_both_sides_of_an_exchange_register_the_same_pool(pair: tuple[PrefillCase, DecodeCase]) -> None:
    pre, dec = pair
    assert pre.state_types == dec.state_types and "DSV4_REQUEST_STATE" not in dec.state_types
    assert DECODE_VIEWS.get(dec.state_types) is not None, dec.state_types
