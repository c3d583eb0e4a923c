"""The per-example limit means one example: a long state-machine test is not a hang; a real hang is caught.

No verdict here depends on the machine's speed. The alarm is a fake (``registry.TIMER``) that records when the
limit is armed and cancelled and fires only when the test fires it: the hanging example blocks until it is
released, and the test fires the alarm once the example is known to be blocked.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from pdverify.properties import registry
from pdverify.properties.registry import EXAMPLES
from pdverify.runner import load_properties, run_property
from pdverify.targets import load_target

settings.register_profile("m1-long", max_examples=500, deadline=None, derandomize=True, database=None)


class FakeTimer(registry.Timer):
    """Records every arm (seconds > 0) and cancel (0); never fires by itself."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def arm(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def timer(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTimer]:
    fake = FakeTimer()
    monkeypatch.setattr(registry, "TIMER", fake)
    saved, EXAMPLES.timeout = EXAMPLES.timeout, 2.0
    try:
        yield fake
    finally:
        EXAMPLES.timeout = saved


def test_each_machine_run_has_a_limit_of_its_own(timer: FakeTimer) -> None:
    """1,000 M1 runs: the limit is armed at the start of each run and cancelled at its end, never left running from
    one run into the next - so the total length of the test can never be taken for a hang."""
    result = run_property(load_properties()["M1"], load_target("pdverify"), profile="m1-long")
    assert result.status == "passed", result.message
    assert result.examples >= 1000
    arms = timer.calls[0::2]
    assert arms == [2.0] * len(arms) and timer.calls[1::2] == [0] * len(arms), timer.calls[:6]
    assert len(timer.calls) == 2 * len(arms) and len(arms) >= 1000


def test_a_hang_inside_a_machine_run_is_caught(timer: FakeTimer) -> None:
    """A decode list that blocks (until released) inside a machine run: the alarm, fired once the example is
    known to be blocked, ends that example and the property fails with the per-example limit."""
    blocked, released = threading.Event(), threading.Event()
    real = load_target("pdverify").require("decode_page_indices")

    def blocks_on_long_requests(*args: Any) -> Any:
        if args[3] >= 40:
            blocked.set()
            while not released.wait(0.01):  # wakes for the signal handler, which raises ExampleTimeout
                pass
        return real(*args)

    def fire_when_blocked() -> None:
        blocked.wait()
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    hangs = load_target("pdverify").derive("hangs-in-m1", decode_page_indices=blocks_on_long_requests)
    firing = threading.Thread(target=fire_when_blocked, daemon=True)
    firing.start()
    try:
        result = run_property(load_properties()["M1"], hangs, profile="m1-long")
    finally:
        released.set()
        blocked.set()
        firing.join()
    assert result.status == "failed" and "per-example limit" in result.message, result.message
    assert timer.calls and timer.calls[-1] == 0, "the limit was left armed"
