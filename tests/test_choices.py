"""``pdverify.strategies._choices.Choices``: the engine's primitives and the public path draw the same examples."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture.choice import ChoiceTemplate
from hypothesis.internal.conjecture.data import ConjectureData

from pdverify.model.pools import STATE_POOLS
from pdverify.strategies._choices import LEANS, Choices
from pdverify.strategies.exchange import draw_decode_case, draw_prefill_case, prefill_cases
from pdverify.strategies.layouts import draw_chunk_ends, draw_paged_row
from pdverify.strategies.queue import decode_queues, draw_decode_queue
from pdverify.strategies.requests import draw_batch

DRAWERS: dict[str, Callable[[Choices], Any]] = {
    "batch": lambda c: draw_batch(c, min_requests=0, max_requests=6, max_prompt=64, spare_rows=2),
    "paged row": lambda c: draw_paged_row(c, None, max_length=1024),
    "chunk ends": lambda c: draw_chunk_ends(c, 40, max_chunks=8),
    "prefill case": lambda c: draw_prefill_case(c, max_length=96, max_chunks=6, max_page_size=16),
    "decode case": lambda c: draw_decode_case(c, max_length=64, max_page_size=16),
    "decode queue": lambda c: draw_decode_queue(c, max_requests=5, max_length=32, max_page_size=16),
    "leaning prefill case": lambda c: (c.lean(), draw_prefill_case(c, max_length=96, max_chunks=6, max_page_size=16)),
    "leaning decode queue": lambda c: (c.lean(), draw_decode_queue(c, max_requests=5, max_length=32, max_page_size=16)),
}


@pytest.mark.parametrize("name", sorted(DRAWERS))
def test_fast_and_public_paths_agree_on_the_same_choices(name: str) -> None:
    drawer = DRAWERS[name]
    for seed in range(40):
        fast_data = ConjectureData(random=random.Random(seed))
        fast = Choices(fast_data.draw)
        assert fast.fast
        value = drawer(fast)
        replay = ConjectureData.for_choices(fast_data.choices)
        public = Choices(replay.draw, fast=False)
        assert not public.fast
        assert drawer(public) == value, f"{name}, seed {seed}"
        assert replay.choices == fast_data.choices


def test_the_fast_path_is_taken_inside_a_hypothesis_run() -> None:
    seen: list[bool] = []

    @st.composite
    def probe(draw: st.DrawFn) -> int:
        c = Choices(draw)
        seen.append(c.fast)
        return c.integer(0, 9)

    @settings(max_examples=5, database=None)
    @given(probe())
    def run(value: int) -> None:
        assert 0 <= value <= 9

    run()
    assert seen and all(seen), "Choices fell back to the public path: Hypothesis's primitives moved?"


def test_a_draw_not_bound_to_conjecture_data_takes_the_public_path() -> None:
    calls: list[Any] = []

    def draw(strategy: Any) -> Any:
        calls.append(strategy)
        return 3

    c = Choices(draw)
    assert not c.fast
    assert c.integer(0, 9) == 3 and calls


def test_bad_arguments_are_errors_and_a_single_value_is_no_choice() -> None:
    data = ConjectureData(random=random.Random(0))
    c = Choices(data.draw)
    with pytest.raises(ValueError, match="lo=5 must be <= hi=4"):
        c.integer(5, 4)
    with pytest.raises(ValueError, match="empty sequence"):
        c.pick([])
    assert c.integer(7, 7) == 7
    assert data.choices == ()


def test_switches_turn_each_item_on_by_its_own_coin_in_a_drawn_order() -> None:
    drawn = []
    for seed in range(200):
        c = Choices(ConjectureData(random=random.Random(seed)).draw)
        got = c.switches("abcdef")
        assert len(set(got)) == len(got) and set(got) <= set("abcdef"), got
        drawn.append(tuple(got))
    assert {len(d) for d in drawn} == set(range(7))  # every count, none to all six
    assert all(any(x in d for d in drawn) for x in "abcdef")
    assert any(list(d) != sorted(d) for d in drawn)  # not only the given order
    assert find(st.composite(lambda draw: Choices(draw).switches("abc"))(), lambda _: True) == []  # shrinks to none


def _simplest(strategy: st.SearchStrategy[Any], lean: int) -> Any:
    """What Hypothesis's zero-extension of the prefix ``(lean,)`` draws: the lean, every later choice simplest."""
    return ConjectureData(prefix=(lean, ChoiceTemplate("simplest", count=None)), random=None).draw(strategy)


def test_a_lean_moves_the_simplest_example_to_the_page_boundaries_with_every_option_on() -> None:
    plain = _simplest(prefill_cases(), 0)
    assert (plain.page_size, plain.length, plain.decode_prefix, plain.chunk_ends) == (1, 1, 0, (1,))
    assert not plain.state_types and plain.translation is None and not plain.kv_checksum and plain.early_prefix is None
    # three pages at (a full decode hit: D == L), one short of and one past the boundary (a one-page prefix and an
    # early send of the next aligned prefix)
    # early send of the next aligned prefix), in pages of the lean's page size: 4, or the one its pool runs at
    expected = {1: (3, 0, 3, 0), 2: (3, -1, 1, 2), 3: (3, 1, 1, 2)}  # (pages, tokens past them, D pages, early pages)
    for lean in range(1, LEANS + 1):
        case = _simplest(prefill_cases(), lean)
        ps = case.page_size
        pages, past, d, early = expected[lean]
        assert (case.length, case.decode_prefix, case.early_prefix) == (pages * ps + past, d * ps, early * ps), case
        assert len(case.chunk_ends) == 2, case
        views = {p.prefill_types: p for p in STATE_POOLS}  # prefill's model's
        assert ps == (4 if views[case.state_types].page_sizes is None else ps), case
        # a pool with state under every lean: the state types are one pool's registration (STATE_POOLS)
        assert case.state_types in views and case.state_types, case.state_types
        assert views[case.state_types].accepts(ps), case
        assert case.translation is not None and case.kv_checksum, case


def test_a_lean_changes_which_value_is_simplest_never_what_a_choice_means_to_the_other_path() -> None:
    for seed in range(40):
        data = ConjectureData(random=random.Random(seed))
        c = Choices(data.draw)
        lean = c.lean()
        values = (c.boolean(lean=True), c.boolean(lean=(2,)), c.integer(0, 9, lean=7), c.seed(lean=True) > 0)
        public = Choices(ConjectureData.for_choices(data.choices).draw, fast=False)
        assert public.lean() == lean
        assert (public.boolean(lean=True), public.boolean(lean=(2,)), public.integer(0, 9, lean=7)) == values[:3]


@pytest.mark.parametrize("seed", range(4))
def test_shrinking_drops_the_lean(seed: int) -> None:
    # a condition on one option shrinks to the plain minimum with that option on, never to a lean's rich example
    # (with the options' values inverted under a lean, the shrinker got stuck in it: every state type on)
    found = find(
        prefill_cases(),
        lambda case: case.kv_checksum,
        settings=settings(database=None, max_examples=2000),
        random=random.Random(seed),
    )
    assert found.kv_checksum and found.length == 1 and not found.state_types and found.translation is None
    queue = find(
        decode_queues(),
        lambda case: case.radix and len(case.requests) > 1,
        settings=settings(database=None, max_examples=2000),
        random=random.Random(seed),
    )
    assert (
        len(queue.requests) == 2 and queue.priority_order is None and queue.swa_free_pages is None and not queue.running
    )
