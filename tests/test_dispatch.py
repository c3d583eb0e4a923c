"""The generate dispatch's model, strategy and port: validated inputs, clear errors, the port against the oracle,
and a strategy that reaches every form of the call the routers send."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import InvalidArgument

from pdverify.model.dispatch import MAX_ROOM, Dispatched, DispatchTrace, GenerateCall
from pdverify.oracle import dispatch as oracle
from pdverify.production.dispatch import generate_dispatch
from pdverify.properties.releases import bind_release
from pdverify.strategies import generate_calls

P = ((1, 2, 3),)
PP = ((1, 2, 3), (4, 5))


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"prompts": ()}, "prompts must be a non-empty tuple"),
        ({"prompts": ((),)}, "each prompt must be a non-empty tuple"),
        ({"prompts": ([1],)}, "each prompt must be a non-empty tuple"),
        ({"prompts": ((-1,),)}, r"prompts\[\]\[\] must be >= 0"),
        ({"prompts": ((1,), (1,)), "single": False}, "must differ pairwise"),
        ({"prompts": PP, "single": True}, "a single call has one prompt, got 2"),
        ({"n": 0}, "n must be >= 1"),
        ({"n": 17}, "n must be <= 16"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"room": -1}, "room must be >= 0"),
        ({"room": MAX_ROOM}, "room \\+ len\\(prompts\\) \\* n - 1 must be <= 2\\*\\*63 - 1"),
        ({"room": (5,)}, r"a single call's rooms name one room per sample \(2\), got 1"),
        ({"room": (5, 5)}, "the per-sample rooms must differ pairwise"),
        ({"room": (5, -1)}, r"room\[\] must be >= 0"),
        ({"room": (5, MAX_ROOM + 1)}, r"room\[\] must be <= 2\*\*63 - 1"),
        ({"stream": 1}, "stream must be a bool"),
        ({"attention_dp": 1}, "attention_dp must be a bool"),
        ({"prompts": PP, "single": False, "room": (5,)}, "one room per prompt \\(2\\), got 1"),
        ({"prompts": PP, "single": False, "room": (5, 6), "n": 2}, "windows .* must be disjoint"),
        ({"prompts": PP, "single": False, "room": (5, MAX_ROOM), "n": 2}, r"room\[\] \+ n - 1 must be <= 2\*\*63"),
        ({"prompts": PP, "single": False, "room": (5, -1)}, r"room\[\] must be >= 0"),
    ],
)
def test_a_call_refuses_bad_fields(fields: dict[str, Any], names: str) -> None:
    base: dict[str, Any] = {"prompts": P, "single": True, "n": 2, "room": 7}
    with pytest.raises(ValueError, match=names):
        GenerateCall(**(base | fields))


def test_the_edges_of_the_room_range_are_calls() -> None:
    GenerateCall(prompts=PP, single=False, n=3, room=MAX_ROOM - 5)
    GenerateCall(prompts=PP, single=False, n=3, room=(0, MAX_ROOM - 2))
    GenerateCall(prompts=PP, single=False, n=3, room=(3, 0))


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"max_prompts": 0}, "max_prompts=0 must be at least 1"),
        ({"max_samples": 0}, "max_samples=0 must be at least 1"),
        ({"max_samples": 17}, "max_samples=17 must be at most 16"),
        ({"max_prompt_len": 0}, "max_prompt_len"),
        ({"max_new_tokens": "8"}, "max_new_tokens='8' must be an integer"),
    ],
)
def test_the_strategy_refuses_bad_arguments(kw: dict[str, Any], names: str) -> None:
    with pytest.raises(InvalidArgument, match=names):
        generate_calls(**kw)


def test_the_port_gives_each_sample_its_own_room() -> None:
    trace = generate_dispatch(GenerateCall(prompts=PP, single=False, n=2, room=(100, 200)), "cpu")
    assert trace.sent == (
        Dispatched(0, 100, 0), Dispatched(1, 200, 0),
        Dispatched(0, 100, 16), Dispatched(0, 101, 16), Dispatched(1, 200, 16), Dispatched(1, 201, 16),
    )  # fmt: skip
    one = generate_dispatch(GenerateCall(prompts=PP, single=False, n=2, room=100), "cpu")
    assert [d.room for d in one.samples()] == [100, 102, 101, 103]  # the expanded requests' own rooms
    each = generate_dispatch(GenerateCall(prompts=P, single=True, n=3, room=(9, 4, 7)), "cpu")
    assert [d.room for d in each.samples()] == [9, 4, 7]  # the gateway's room per sample


def test_the_oracle() -> None:
    call = GenerateCall(prompts=PP, single=False, n=3, room=(10, 20))
    assert oracle.samples(call) == [0, 0, 0, 1, 1, 1]
    assert oracle.router_rooms(call) is None
    assert oracle.router_rooms(GenerateCall(prompts=PP, single=False, room=(10, 20))) == [10, 20]
    assert oracle.router_rooms(GenerateCall(prompts=PP, single=False, room=10)) == [10, 11]
    assert oracle.duplicates([1, 2, 1, None, 1, None]) == [1, None]
    assert oracle.duplicates([1, 2, 3]) == []


def test_a_trace_names_its_samples() -> None:
    trace = DispatchTrace(sent=(Dispatched(0, 5, 0), Dispatched(0, 5, 8)))
    assert trace.samples() == (Dispatched(0, 5, 8),)


def test_the_input_feature_of_one_room_for_an_expanded_call() -> None:
    assert GenerateCall(prompts=P, single=True, n=2, room=7).input_features() == ("scalar_bootstrap_batch",)
    assert GenerateCall(prompts=PP, single=False, room=7).input_features() == ("scalar_bootstrap_batch",)
    assert GenerateCall(prompts=P, single=True, room=7).input_features() == ()
    assert GenerateCall(prompts=PP, single=False, n=2, room=(7, 70)).input_features() == ()
    assert GenerateCall(prompts=P, single=True, n=2, room=(7, 70)).input_features() == ()


def test_the_strategy_reaches_every_form() -> None:
    seen: set[str] = set()

    @settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
    @given(call=generate_calls())
    def draw(call: GenerateCall) -> None:
        seen.add("single" if call.single else "batch")
        seen.add("samples" if call.n > 1 else "one sample")
        seen.add(
            ("per-sample rooms" if call.single else "per-prompt rooms") if isinstance(call.room, tuple) else "one room"
        )
        seen.add("streamed" if call.stream else "collected")
        seen.add("attention DP" if call.attention_dp else "no attention DP")
        rooms = call.room if isinstance(call.room, tuple) else (call.room,)
        span = call.n if isinstance(call.room, tuple) else call.n * len(call.prompts)
        seen.update({"room 0"} if 0 in rooms else set())
        seen.update({"last room"} if any(r + span - 1 == MAX_ROOM for r in rooms) else set())
        seen.update({"gRPC router's last room"} if 2**31 - 2 in rooms else set())

    draw()
    wanted = {"single", "batch", "samples", "one sample", "per-prompt rooms", "per-sample rooms", "one room", "room 0",
              "last room",
              "gRPC router's last room", "streamed", "collected", "attention DP", "no attention DP"}  # fmt: skip
    assert wanted <= seen, f"never drawn: {wanted - seen}"


def test_the_strategy_follows_the_release_domain() -> None:
    bind_release("0.5.1.post3")
    try:

        @settings(max_examples=80, deadline=None)
        @given(call=generate_calls())
        def draw(call: GenerateCall) -> None:
            assert "scalar_bootstrap_batch" not in call.input_features()

        draw()
    finally:
        bind_release(None)
