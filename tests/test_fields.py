"""Adding a request field through the registry: one entry, and every batch strategy and target sees it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pdverify.oracle.prebuilt import expected_prebuilt
from pdverify.production.prebuilt import prepare_for_prebuilt
from pdverify.strategies import RequestField, batches, registered
from pdverify.strategies.fields import REGISTRY, expected_effects, register_field, unregister_field
from pdverify.targets import Target, load_target
from pdverify.targets.layouts import run_prepare_for_prebuilt


@contextmanager
def priority_field() -> Iterator[RequestField]:
    with registered(RequestField("priority", st.integers(1, 3), default=0, description="scheduler priority")) as f:
        yield f


def clobbering_target() -> Target:
    """A target whose prepare_for_prebuilt resets the (registered) priority field: P30 must catch it."""

    def prepare(batch: Any) -> None:
        prepare_for_prebuilt(batch)
        for req in batch.reqs:
            req.priority = 0

    return load_target("pdverify").derive("clobber-priority", prepare_for_prebuilt=prepare)


def test_registered_field_reaches_batches_and_targets() -> None:
    seen: list[Any] = []

    @settings(max_examples=20, database=None)
    @given(batch=batches(min_requests=1))
    def check(batch: Any) -> None:
        for req in batch.reqs:
            assert 1 <= req.extra["priority"] <= 3
        out = run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")
        exp = expected_prebuilt(batch, expected_effects())
        assert [r.extra for r in out.reqs_after] == [r.extra for r in exp.reqs_after]
        seen.append(out.batch_object.reqs[0].priority)

    with priority_field():
        check()
    assert seen and "priority" not in REGISTRY


def test_expected_effect_is_applied() -> None:
    spec = RequestField("ticks", st.integers(0, 5), expected_after=lambda v: v + 1)
    with registered(spec):
        batch = one_batch()
    batch.reqs[0].extra = {"ticks": 2}
    exp = expected_prebuilt(batch, {"ticks": spec.expected_after})
    assert exp.reqs_after[0].extra == {"ticks": 3}


def test_oracle_refuses_a_field_without_effect() -> None:
    batch = one_batch()
    batch.reqs[0].extra = {"mystery": 1}
    with pytest.raises(ValueError, match="mystery"):
        expected_prebuilt(batch, {})


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (RequestField("not an identifier", st.none()), "identifier"),
        (RequestField("prefix_len", st.none()), "built-in"),
        (RequestField("x", 5), "SearchStrategy"),  # type: ignore[arg-type]
        (RequestField("y", st.none(), expected_after=3), "callable"),  # type: ignore[arg-type]
    ],
)
def test_bad_fields_rejected(spec: RequestField, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        register_field(spec)


def test_double_registration_and_unknown_removal() -> None:
    with priority_field(), pytest.raises(InvalidArgument, match="already"):
        register_field(RequestField("priority", st.none()))
    with pytest.raises(InvalidArgument, match="not registered"):
        unregister_field("priority")


def one_batch() -> Any:
    """A single drawn batch (``find`` rather than ``.example()``, which is for interactive use)."""
    from hypothesis import find

    return find(batches(min_requests=1, max_requests=1), lambda b: True, settings=settings(database=None))
