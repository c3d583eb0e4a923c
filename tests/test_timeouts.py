"""The per-example limit means one example: a long state-machine test is not a hang; a real hang is caught."""

from __future__ import annotations

import time

from hypothesis import settings

from pdverify.properties.registry import EXAMPLES
from pdverify.runner import load_properties, run_property
from pdverify.targets import load_target
from tests import user_targets

settings.register_profile("m1-long", max_examples=500, deadline=None, derandomize=True, database=None)


def test_thousand_machine_runs_pass_under_a_short_per_example_limit() -> None:
    """1,000 M1 runs take far longer than the 2 s limit in total; each run is well under it."""
    saved, EXAMPLES.timeout = EXAMPLES.timeout, 2.0
    try:
        t0 = time.perf_counter()
        result = run_property(load_properties()["M1"], load_target("pdverify"), profile="m1-long")
        elapsed = time.perf_counter() - t0
    finally:
        EXAMPLES.timeout = saved
    assert result.status == "passed", result.message
    assert result.examples >= 1000
    assert elapsed > 2.0, (
        f"the whole run ({elapsed:.1f}s) must exceed the per-example limit for this test to mean anything"
    )


def test_a_hang_inside_a_machine_run_is_still_caught() -> None:
    saved, EXAMPLES.timeout = EXAMPLES.timeout, 1.0
    try:
        t0 = time.perf_counter()
        result = run_property(load_properties()["M1"], user_targets.hangs_in_machine, profile="m1-long")
    finally:
        EXAMPLES.timeout = saved
    assert result.status == "failed" and "per-example limit" in result.message, result.message
    assert time.perf_counter() - t0 < 20
