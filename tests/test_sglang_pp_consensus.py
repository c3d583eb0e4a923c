"""A PP stage of decode's pre-allocation queue (0.5.7 on, the decode PP event loop #14945) runs SGLang's own step:
the driver calls the release's ``SchedulerPPMixin.process_prealloc_queue`` with the stages' consensus on a stage of
``pp_size`` 2. From 0.5.17 (#31869) that step gives ``pop_preallocated`` the consensus and the release maps it to
poll states itself (``poll_and_all_reduce_pp``); before, it hands the pass ``rids_to_check`` = good + bad and the
pass polls the stage's own receivers (T32). A mapping planted to drop the bad list makes Q1 fail on the PP example.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed or the release has no decode PP loop.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

decode = pytest.importorskip("sglang.srt.disaggregation.decode", reason="needs SGLang (the conformance env)")
pp_mixin = pytest.importorskip("sglang.srt.managers.scheduler_pp_mixin", reason="needs SGLang's scheduler")
if not hasattr(pp_mixin.SchedulerPPMixin, "process_prealloc_queue"):
    pytest.skip("the release has no decode PP loop (before 0.5.7)", allow_module_level=True)
CONSENSUS_PASS = hasattr(decode, "poll_and_all_reduce_pp")
"""The release's pass takes the consensus (0.5.17 on, #31869)."""


def _pp_example() -> Any:
    """The queue's four-request PP example (one bad, one still bootstrapping and one failed since among the good, one
    aborted), not the radix one that pins T32's Q5 form."""
    from pdverify.properties.test_decode_queue import EXAMPLES

    return next(case for case in EXAMPLES if case.pp_consensus and len(case.requests) == 4)


def test_the_pp_step_is_the_releases_own() -> None:
    """The driver's PP step is the release's ``process_prealloc_queue``, given (good, bad) in queue order; it hands
    the pass the consensus in the release's form."""
    from pdverify.targets import load_target

    case = _pp_example()
    unit = load_target("sglang").require("decode_queue")
    steps: list[Any] = []
    passes: list[dict[str, Any]] = []
    step, real_pass = pp_mixin.SchedulerPPMixin.process_prealloc_queue, decode.DecodePreallocQueue.pop_preallocated

    def spy_step(self: Any, prealloc_rids: Any) -> Any:
        steps.append([list(x) for x in prealloc_rids])
        return step(self, prealloc_rids)

    def spy_pass(self: Any, *args: Any, **kw: Any) -> Any:
        passes.append({k: list(v) for k, v in kw.items()})
        return real_pass(self, *args, **kw)

    with (
        mock.patch.object(pp_mixin.SchedulerPPMixin, "process_prealloc_queue", spy_step),
        mock.patch.object(decode.DecodePreallocQueue, "pop_preallocated", spy_pass),
    ):
        unit(case, "cpu")
    assert steps == [[["r1", "r2"], ["r0"]]], steps
    if CONSENSUS_PASS:
        assert passes == [{"pp_good_rids": ["r1", "r2"], "pp_bad_rids": ["r0"]}], passes
    else:
        assert passes == [{"rids_to_check": ["r1", "r2", "r0"]}], passes


@pytest.mark.skipif(not CONSENSUS_PASS, reason="the release's pass polls its own receivers (T32, before 0.5.17)")
def test_the_pp_pass_maps_the_consensus_through_sglangs_own_code() -> None:
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.targets import load_target

    case = _pp_example()
    unit = load_target("sglang").require("decode_queue")
    calls: list[tuple[list[str], list[str]]] = []
    real = decode.poll_and_all_reduce_pp

    def spy(rids: Any, ready: int, good: list[str], bad: list[str]) -> Any:
        calls.append((list(good), list(bad)))
        return real(rids, ready, good, bad)

    with mock.patch.object(decode, "poll_and_all_reduce_pp", spy):
        trace = unit(case, "cpu")
    assert calls == [(["r1", "r2"], ["r0"])], calls
    want = expected_pass(case)
    assert (list(trace.admitted), list(trace.failed), list(trace.remaining)) == (want.admitted, want.failed,
                                                                                  want.remaining)  # fmt: skip
    assert (want.admitted, want.failed, want.remaining) == ([1, 2], [0], [3])


@pytest.mark.skipif(not CONSENSUS_PASS, reason="the release's pass polls its own receivers (T32, before 0.5.17)")
def test_q1_fails_when_the_bad_list_is_dropped() -> None:
    from pdverify.properties.test_decode_queue import test_q1_aborted_requests_fail
    from pdverify.targets import load_target

    real = decode.poll_and_all_reduce_pp

    def no_bad(rids: Any, ready: int, good: list[str], bad: list[str]) -> Any:
        return real(rids, ready, good, [])

    target = load_target("sglang")
    dropped = mock.patch.object(decode, "poll_and_all_reduce_pp", no_bad)
    with dropped, pytest.raises(AssertionError, match="failed none, expected #0"):
        test_q1_aborted_requests_fail.hypothesis.inner_test(target, "cpu", _pp_example())  # type: ignore[attr-defined]


@pytest.mark.skipif(CONSENSUS_PASS, reason="the release's pass takes the consensus (0.5.17 on)")
def test_the_step_before_the_fix_follows_the_stages_own_receivers() -> None:
    """T32 on the PP example: the stage admits #0, which another stage failed (its own receiver is ready), and fails
    #2, whose receiver here failed after the stages agreed to take it."""
    from pdverify.targets import load_target

    trace = load_target("sglang").require("decode_queue")(_pp_example(), "cpu")
    assert 0 in trace.admitted and 2 in trace.failed, trace
