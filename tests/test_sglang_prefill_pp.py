"""A later stage of a pipeline-parallel prefill server (0.5.1 on, the prefill PP event loop #8846) runs SGLang's own
bootstrap step: the prefill exchange driver calls the release's ``SchedulerPPMixin.process_bootstrapped_queue`` on a
stage of ``pp_size`` 2 (0.5.7 on), or, before, the ``pop_bootstrapped(rids_to_check=...)`` call of the release's PP
loop. From 0.5.22 the pass takes the first stage's polls through the PP group (``pp_sync_polls``); 0.5.17-0.5.21 it
maps the consensus lists (``poll_and_all_reduce_pp``); before, it polls the stage's own sender for every listed rid
(T33). The stages' agreement is each release's own: from 0.5.22 the first stage's ``check_status_pp_consensus`` (the
least of every stage's status), 0.5.7-0.5.21 the stage's own ``_pp_pd_get_bootstrapped_ids`` (its own poll
intersected with the first stage's), before the rids the first stage popped - where a stage whose own sender is late
asserts (T34). A PP group planted to hand on a ready poll for a failed request, or an agreement that leaves a late
stage's own poll out, makes S25 fail.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped where
SGLang is not installed or the release has no prefill PP loop.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any
from unittest import mock

import pytest

prefill = pytest.importorskip("sglang.srt.disaggregation.prefill", reason="needs SGLang (the conformance env)")
try:
    from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin as PP_MIXIN
except ImportError:  # the mixin came in 0.5.4; the PP loop was prefill's own before
    PP_MIXIN = None
if not any(hasattr(m, "event_loop_pp_disagg_prefill") for m in (prefill.SchedulerDisaggregationPrefillMixin, PP_MIXIN)):
    pytest.skip("the release has no prefill PP loop (before 0.5.1)", allow_module_level=True)
utils = pytest.importorskip("sglang.srt.disaggregation.utils")
FIRST_STAGE_POLLS = hasattr(utils, "poll_and_all_reduce_prefill_pp")
"""Every later stage takes the first stage's polls (0.5.22 on)."""
CONSENSUS_LISTS = "pp_good_rids" in inspect.signature(prefill.PrefillBootstrapQueue.pop_bootstrapped).parameters
"""The pass maps the consensus lists to polls (0.5.17-0.5.21, #31869)."""
FOLLOWS = FIRST_STAGE_POLLS or CONSENSUS_LISTS


def _case() -> Any:
    """A 10-token request on pages 5 6 2 at page size 4, prefilled in two chunks, no decode prefix (every release
    with a prefill PP loop takes it)."""
    from pdverify.model.exchange import PrefillCase

    return PrefillCase(4, 10, 0, tuple(p * 4 + o for p in (5, 6, 2) for o in range(4))[:10], (6, 10))


def _s25(consensus: str, waits: int = 0, late: bool = False) -> None:
    from pdverify.properties.test_sender_bootstrap import test_s25_pp_stage_follows_the_consensus as s25
    from tests.sglang_release import release_target

    s25.hypothesis.inner_test(release_target(), "cpu", _case(), consensus, waits, late)  # type: ignore[attr-defined]


@pytest.mark.parametrize("consensus", ["good", "bad"])
def test_the_pp_step_is_the_releases_own(consensus: str) -> None:
    """The driver's step is the release's own, and hands the pass the agreement in the release's form."""
    from dataclasses import replace

    from sglang.srt.disaggregation.base.conn import KVPoll

    from pdverify.targets import load_target

    steps: list[Any] = []
    passes: list[dict[str, Any]] = []
    syncs: list[tuple[Any, int, int]] = []
    real_pass = prefill.PrefillBootstrapQueue.pop_bootstrapped

    def spy_pass(self: Any, *args: Any, **kw: Any) -> Any:
        passes.append({k: list(v) if isinstance(v, list) else v for k, v in kw.items()})
        return real_pass(self, *args, **kw)

    patches: list[Any] = [mock.patch.object(prefill.PrefillBootstrapQueue, "pop_bootstrapped", spy_pass)]
    real_step = getattr(PP_MIXIN, "process_bootstrapped_queue", None)
    if real_step is not None:

        @functools.wraps(real_step)  # the driver reads the step's signature for its form
        def spy_step(self: Any, *args: Any) -> Any:
            steps.append([list(x) for x in args[0]] if args else None)
            return real_step(self, *args)

        patches.append(mock.patch.object(PP_MIXIN, "process_bootstrapped_queue", spy_step))
    if FIRST_STAGE_POLLS:
        real_sync = utils.pp_sync_polls

        def spy_sync(polls: Any, group: Any, rank: int, size: int, work: Any) -> Any:
            got = real_sync(polls, group, rank, size, work)
            syncs.append((list(got), rank, size))
            return got

        patches.append(mock.patch.object(utils, "pp_sync_polls", spy_sync))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        trace = load_target("sglang").require("prefill_exchange")(replace(_case(), pp_consensus=consensus), "cpu")
    good, bad = (["r0"], []) if consensus == "good" else ([], ["r0"])
    assert trace.dropped == (consensus == "bad" and FOLLOWS), trace
    if FIRST_STAGE_POLLS:
        assert steps == [None] and passes == [{}], (steps, passes)
        first = KVPoll.WaitingForInput if consensus == "good" else KVPoll.Failed
        assert syncs == [([first], 1, 2)], syncs
    elif CONSENSUS_LISTS:
        assert steps == [[good, bad]], steps
        assert passes == [{"return_failed_reqs": True, "pp_good_rids": good, "pp_bad_rids": bad}], passes
    elif real_step is not None:  # 0.5.7-0.5.16
        assert steps == [[good, bad]], steps
        assert passes == [{"return_failed_reqs": True, "rids_to_check": good + bad}], passes
    else:  # 0.5.1-0.5.6.post2: the PP loop's own call on a later stage, the first stage's popped rids
        assert passes == [{"rids_to_check": ["r0"]}], passes


@pytest.mark.parametrize("waits", [0, 2])
def test_s25_passes_on_the_release(waits: int) -> None:
    if not FOLLOWS:
        pytest.skip("the release's stage follows its own sender (T33, before 0.5.17)")
    _s25("good", waits)
    _s25("bad", waits)


@pytest.mark.skipif(not FIRST_STAGE_POLLS, reason="the stages agree by consensus lists (before 0.5.22)")
def test_s25_fails_when_the_pp_group_hands_on_a_ready_poll() -> None:
    """A PP group planted to hand a later stage a ready poll where the first stage's failed: S25 sees the request
    bootstrapped."""
    from sglang.srt.disaggregation.base.conn import KVPoll

    real_sync = utils.pp_sync_polls

    def ready(*args: Any) -> Any:
        return [KVPoll.WaitingForInput for _ in real_sync(*args)]

    with mock.patch.object(utils, "pp_sync_polls", ready), pytest.raises(AssertionError, match="agreed failed"):
        _s25("bad")


@pytest.mark.skipif(not CONSENSUS_LISTS, reason="the pass maps no consensus lists (0.5.17-0.5.21 only)")
def test_s25_fails_when_the_bad_list_is_dropped() -> None:
    real = utils.poll_and_all_reduce_pp

    def no_bad(rids: Any, ready: int, good: Any, bad: Any) -> Any:
        return real(rids, ready, good, [])

    with mock.patch.object(prefill, "poll_and_all_reduce_pp", no_bad), pytest.raises(AssertionError):
        _s25("bad")


@pytest.mark.skipif(FOLLOWS, reason="the release's stage follows the agreement (0.5.17 on)")
def test_the_stage_before_the_fix_follows_its_own_sender() -> None:
    """T33: a request the stages agreed failed, this stage's own sender ready, is bootstrapped and shipped here."""
    with pytest.raises(AssertionError, match="agreed failed was not failed on this stage"):
        _s25("bad")
    _s25("good")


AGREES = hasattr(PP_MIXIN, "_pp_pd_get_bootstrapped_ids")
"""The stages agree by the stage's own ``_pp_pd_get_bootstrapped_ids`` (0.5.7-0.5.21; 0.5.22 on it is not called)."""


def _late(consensus: str) -> Any:
    from dataclasses import replace

    from pdverify.targets import load_target

    return load_target("sglang").require("prefill_exchange")(
        replace(_case(), pp_consensus=consensus, pp_own_late=True), "cpu"
    )


@pytest.mark.skipif(FIRST_STAGE_POLLS or not AGREES, reason="the stages agree by consensus lists (0.5.7-0.5.21)")
@pytest.mark.parametrize("consensus", ["good", "bad"])
def test_a_late_stage_agrees_by_its_own_consensus_step(consensus: str) -> None:
    """0.5.7-0.5.21: the agreement is the release's own ``_pp_pd_get_bootstrapped_ids`` on this stage (the first
    stage's lists intersected with this stage's own ``get_rids``): while this stage's sender is late the request is
    agreed nowhere good; a failed one is agreed bad at once."""
    real = PP_MIXIN._pp_pd_get_bootstrapped_ids
    agreed: list[list[list[str]]] = []

    def spy(self: Any) -> Any:
        got = real(self)
        agreed.append([sorted(x) for x in got])
        return got

    with mock.patch.object(PP_MIXIN, "_pp_pd_get_bootstrapped_ids", spy):
        trace = _late(consensus)
    if consensus == "good":
        assert agreed == [[[], []], [["r0"], []]] and trace.bootstraps == [False, True], (agreed, trace.bootstraps)
    elif CONSENSUS_LISTS:
        assert agreed == [[[], ["r0"]]] and trace.dropped, (agreed, trace)
    else:  # 0.5.7-0.5.16 keep it (T33); the first stage dropped it, so no later agreement names it
        assert agreed == [[[], ["r0"]], [[], []]] and not trace.dropped, (agreed, trace)
        assert trace.bootstraps == [False, False] and not trace.transfers, trace


@pytest.mark.skipif(not FIRST_STAGE_POLLS, reason="the first stage's polls are handed on from 0.5.22")
@pytest.mark.parametrize("consensus", ["good", "bad"])
def test_a_late_stage_gets_the_least_of_the_stages_statuses(consensus: str) -> None:
    """0.5.22 on: the poll handed on is the first stage's ``check_status_pp_consensus`` over every stage's status -
    Bootstrapping while this stage's sender is late, Failed where the first stage's failed."""
    from sglang.srt.disaggregation.base.conn import KVPoll

    real_sync = utils.pp_sync_polls
    syncs: list[list[Any]] = []

    def spy_sync(*args: Any) -> Any:
        got = real_sync(*args)
        syncs.append(list(got))
        return got

    with mock.patch.object(utils, "pp_sync_polls", spy_sync):
        trace = _late(consensus)
    if consensus == "good":
        assert syncs == [[KVPoll.Bootstrapping], [KVPoll.WaitingForInput]], syncs
        assert trace.bootstraps == [False, True] and not trace.dropped, trace
    else:
        assert syncs == [[KVPoll.Failed]] and trace.dropped, (syncs, trace)


@pytest.mark.skipif(not FOLLOWS, reason="before 0.5.17 the stage follows its own sender (T33) or asserts (T34)")
def test_s25_passes_with_a_late_stage() -> None:
    _s25("good", 0, late=True)
    _s25("good", 2, late=True)
    _s25("bad", 0, late=True)


@pytest.mark.skipif(not FOLLOWS, reason="before 0.5.17 the pass polls the stage's own sender again (no plant shows)")
def test_s25_fails_when_the_agreement_leaves_the_late_stage_out() -> None:
    """An agreement taken from the first stage alone (the first stage's status, or its lists), this stage's late
    sender left out: the stage finalises the request before decode's destinations reach its sender, and S25 sees it
    bootstrapped at the first step."""
    from sglang.srt.disaggregation.common.conn import CommonKVManager

    def first_status(self: Any, room: int) -> Any:
        return self.request_status.collect(room)[0]

    def first_lists(self: Any) -> Any:
        return self._pp_recv_pyobj_from_prev_stage()

    plant: Any
    if FIRST_STAGE_POLLS:
        plant = mock.patch.object(CommonKVManager, "check_status_pp_consensus", first_status)
    else:
        plant = mock.patch.object(PP_MIXIN, "_pp_pd_get_bootstrapped_ids", first_lists)
    with plant, pytest.raises(AssertionError, match=r"sender late\): dropped False, bootstraps \[True\]"):
        _s25("good", 0, late=True)


@pytest.mark.skipif(AGREES or FIRST_STAGE_POLLS, reason="0.5.7 on, each stage's own poll joins the agreement")
def test_a_late_stage_asserts_before_the_consensus() -> None:
    """T34 (0.5.1-0.5.6.post2): the first stage popped the request; this stage's sender is still bootstrapping, and
    the release's pass asserts it finished (``poll == WaitingForInput or poll == Failed``)."""
    from pdverify.targets.sglang_prefill import StageStepRaised

    for consensus in ("good", "bad"):
        with pytest.raises(StageStepRaised, match=r"raised AssertionError at prefill\.py:\d+ `assert poll =="):
            _s25(consensus, 0, late=True)
