"""A PP pass of decode's pre-allocation queue (0.5.17 on, #31869) runs SGLang's own PP handshake: the driver gives
``pop_preallocated`` the stages' consensus and a stage of ``pp_size`` 2, and the release maps the consensus to poll
states itself (``poll_and_all_reduce_pp``). A mapping planted to drop the bad list makes Q1 fail on the PP example.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed or the release has no PP consensus.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

decode = pytest.importorskip("sglang.srt.disaggregation.decode", reason="needs SGLang (the conformance env)")
if not hasattr(decode, "poll_and_all_reduce_pp"):
    pytest.skip("the release has no PP consensus (before 0.5.17)", allow_module_level=True)


def _pp_example() -> Any:
    from pdverify.properties.test_decode_queue import EXAMPLES

    return next(case for case in EXAMPLES if case.pp_consensus)


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
