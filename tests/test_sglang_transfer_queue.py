"""Q7's driver runs SGLang's own transfer queue: prefill's row written by the release's writer and copied by its
``send_aux``, decode's ``pop_transferred`` over its own ``MetadataBuffers`` and allocator. A row planted to land one
slot off, or the commit planted to read another token, makes Q7 fail; as released (0.5.9 on), room 0 is F8.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped where
SGLang is not installed or the release has no KV transport (0.4.4.post2-0.4.5).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any
from unittest import mock

import pytest

from pdverify.model.transfer_queue import Transfer, TransferQueueCase

pytest.importorskip("sglang", reason="needs SGLang (the conformance env)")
if importlib.util.find_spec("sglang.srt.disaggregation.mooncake") is None:
    pytest.skip("the release has no KV transport (before 0.4.5.post1)", allow_module_level=True)

CASE = TransferQueueCase(
    transfers=(Transfer(room=2**31 - 2, decode_slot=2, prefill_slot=5, first_token=791),
               Transfer(room=17, decode_slot=0, prefill_slot=1, first_token=128009, poll="transferring"),
               Transfer(room=2**63 - 1, decode_slot=4, prefill_slot=3, first_token=9906, max_new_tokens=1)),
    slots=6,
)  # fmt: skip


def _target() -> Any:
    from pdverify.targets import load_target

    return load_target("sglang")


def _sglang() -> Any:
    """The release's modules, imported in the server's order (the driver's: 0.4.6's layers import in a cycle)."""
    from pdverify.targets.sglang_transfer_queue import _modules

    _target()
    return _modules()


def _q7(case: TransferQueueCase) -> None:
    from pdverify.properties.test_transfer_queue import test_q7_transfer_queue_commits

    test_q7_transfer_queue_commits.hypothesis.inner_test(_target(), "cpu", case)  # type: ignore[attr-defined]


def test_the_pass_runs_sglangs_own_aux_transfer_and_pop_transferred() -> None:
    sg = _sglang()
    sends: list[int] = []
    passes: list[int] = []
    send_aux, pop = sg.MooncakeKVManager.send_aux, sg.DecodeTransferQueue.pop_transferred

    @functools.wraps(send_aux)  # the driver reads the release's form of send_aux from its signature
    def spy_send_aux(self: Any, *args: Any) -> Any:
        sends.append(args[1])  # prefill_aux_index in every form
        return send_aux(self, *args)

    def spy_pop(self: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append(len(self.queue))
        return pop(self, *args, **kwargs)

    with (
        mock.patch.object(sg.MooncakeKVManager, "send_aux", spy_send_aux),
        mock.patch.object(sg.DecodeTransferQueue, "pop_transferred", spy_pop),
    ):
        trace = _target().require("transfer_queue")(CASE, "cpu")
    assert (sorted(sends), passes) == ([3, 5], [3]), (sends, passes)
    assert (trace.committed, trace.tokens, trace.queued, trace.freed) == ((0, 2), (791, 9906), (1,), (2, 4)), trace
    assert not trace.raised and not trace.aborted, trace


def test_q7_fails_when_the_aux_transfer_lands_in_another_slot() -> None:
    sg = _sglang()
    send_aux = sg.MooncakeKVManager.send_aux

    @functools.wraps(send_aux)
    def one_off(self: Any, *args: Any) -> Any:
        if hasattr(args[0], "dst_aux_index"):  # 0.5.1 on: the destination rides on the transfer info
            args[0].dst_aux_index = (args[0].dst_aux_index + 1) % CASE.slots
            return send_aux(self, *args)
        session, source, ptrs, destination = args
        return send_aux(self, session, source, ptrs, (destination + 1) % CASE.slots)

    _q7(CASE)
    with mock.patch.object(sg.MooncakeKVManager, "send_aux", one_off), pytest.raises(AssertionError, match="committed"):
        _q7(CASE)


def test_q7_fails_when_a_failed_transfer_is_not_aborted() -> None:
    import sglang

    from pdverify.properties.releases import FROM_TRANSFER_FAILURE_ABORT

    if FROM_TRANSFER_FAILURE_ABORT.not_applicable(sglang.__version__):
        pytest.skip("the release raises on a failed transfer by design (before #6504)")
    case = TransferQueueCase(transfers=(*CASE.transfers, Transfer(room=5, decode_slot=5, prefill_slot=0,
                                                                  first_token=1, poll="failed")), slots=6)  # fmt: skip
    _q7(case)
    # the abort planted away: the failed request leaves the queue unaborted, its client never answered
    with (
        mock.patch.object(_sglang().decode, "prepare_abort", lambda *a, **kw: None),
        pytest.raises(AssertionError, match="abort"),
    ):
        _q7(case)


def test_nixl_rows_travel_through_sglangs_own_nixl_send_aux() -> None:
    sg = _sglang()
    if sg.NixlKVManager is None:
        pytest.skip("the release has no NIXL transport (before 0.4.5.post3)")
    sends: list[int] = []
    send_aux = sg.NixlKVManager.send_aux

    @functools.wraps(send_aux)
    def spy(self: Any, *args: Any) -> Any:
        sends.append(args[1])  # prefill_aux_index
        return send_aux(self, *args)

    case = TransferQueueCase(transfers=CASE.transfers, slots=CASE.slots, transport="nixl")
    with mock.patch.object(sg.NixlKVManager, "send_aux", spy):
        trace = _target().require("transfer_queue")(case, "cpu")
    assert sorted(sends) == [3, 5], sends
    assert (trace.committed, trace.tokens, trace.queued, trace.freed) == ((0, 2), (791, 9906), (1,), (2, 4)), trace


LOGPROBS = TransferQueueCase(
    transfers=(Transfer(room=2**31 - 2, decode_slot=5, prefill_slot=23, first_token=9906, max_new_tokens=256,
                        logprob=-0.3125, top_logprobs=((-0.3125, 9906), (-1.5, 791), (-2.25, 40)),
                        token_ids_logprob=(9906, 791)),),
    slots=64,
)  # fmt: skip
"""A Llama-3.1 request asking for logprobs with three top logprobs and two token ids' (Mooncake's transport)."""


def _releases_version() -> str:
    import sglang

    return str(sglang.__version__)


def test_top_logprobs_and_the_token_ids_row_as_released() -> None:
    from pdverify.findings import T29_MOONCAKE, T30_RELEASES
    from pdverify.properties.releases import FROM_PD_LOGPROB

    version = _releases_version()
    if FROM_PD_LOGPROB.not_applicable(version):
        pytest.skip("no PD logprobs before #6558")
    trace = _target().require("transfer_queue")(LOGPROBS, "cpu")
    want_top = (((-0.3125, 9906), (-1.5, 791), (-2.25, 40)),)
    if version in T29_MOONCAKE:  # the aux transfer moves the output ids only: decode's cleared top row
        want_top = (((0.0, 0), (0.0, 0), (0.0, 0)),)
    assert trace.top == want_top, trace
    assert trace.rows == ((1, 1, 0 if version in T30_RELEASES else 1),), trace
    if version in T30_RELEASES:
        with pytest.raises(AssertionError, match=r"logprob rows \[\(1, 1, 0\)\]"):
            _q7(LOGPROBS)


def test_q7_fails_when_the_token_ids_row_is_planted_away() -> None:
    from pdverify.findings import T30_RELEASES

    sg = _sglang()
    if _releases_version() in T30_RELEASES:
        pytest.skip("the release reserves no token-ids row (T30): nothing to plant away")
    if not hasattr(sg.DecodeTransferQueue, "_commit_transfer_to_req"):
        pytest.skip("no PD logprobs before #6558")
    commit = sg.DecodeTransferQueue._commit_transfer_to_req

    def without_row(self: Any, decode_req: Any) -> Any:  # 0.5.22's commit: no row for the first token's token ids
        out = commit(self, decode_req)
        lists = decode_req.req.logprob
        if lists.token_ids_logprob is not None and lists.output_token_ids_logprobs_val:
            lists.output_token_ids_logprobs_val.pop()
            lists.output_token_ids_logprobs_idx.pop()
        return out

    _q7(LOGPROBS)
    with (
        mock.patch.object(sg.DecodeTransferQueue, "_commit_transfer_to_req", without_row),
        pytest.raises(AssertionError, match="logprob rows"),
    ):
        _q7(LOGPROBS)


PP_CASE = TransferQueueCase(
    transfers=(Transfer(room=4242, decode_slot=5, prefill_slot=23, first_token=128006, consensus="bad"),
               Transfer(room=4243, decode_slot=6, prefill_slot=24, first_token=128006, consensus="good"),
               Transfer(room=4244, decode_slot=7, prefill_slot=25, first_token=791, poll="failed"),
               Transfer(room=4245, decode_slot=1, prefill_slot=2, first_token=791, poll="failed", consensus="bad")),
    slots=64,
    pp_step=True,
)  # fmt: skip
"""A PP stage's transfer step: #0 failed on another stage (its receiver here succeeded), #1 succeeded everywhere, #2
failed here but not yet agreed on, #3 failed here and agreed bad."""


def _pp_mixin() -> Any:
    mixin = pytest.importorskip("sglang.srt.managers.scheduler_pp_mixin").SchedulerPPMixin
    if not hasattr(mixin, "process_decode_transfer_queue"):
        pytest.skip("the release has no decode PP loop (before 0.5.7)")
    return mixin


def test_the_pp_step_is_the_releases_own() -> None:
    """The driver's PP step is the release's ``process_decode_transfer_queue``, handed the consensus in the release's
    form - the rids every stage finished, good and bad alike (the released form), or [good, bad] (F11's fix) - and its
    pass looks at no other transfer."""
    mixin = _pp_mixin()
    sg = _sglang()
    steps: list[Any] = []
    passes: list[tuple[Any, ...]] = []
    real_step, real_pass = mixin.process_decode_transfer_queue, sg.DecodeTransferQueue.pop_transferred

    def spy_step(self: Any, release_rids: Any) -> Any:
        steps.append(release_rids)
        return real_step(self, release_rids)

    @functools.wraps(real_pass)  # the driver reads the pass's signature for the consensus form
    def spy_pass(self: Any, *args: Any, **kw: Any) -> Any:
        passes.append((args, kw))
        return real_pass(self, *args, **kw)

    with (
        mock.patch.object(mixin, "process_decode_transfer_queue", spy_step),
        mock.patch.object(sg.DecodeTransferQueue, "pop_transferred", spy_pass),
    ):
        trace = _target().require("transfer_queue")(PP_CASE, "cpu")
    assert steps in ([["pdverify-tq-1", "pdverify-tq-0", "pdverify-tq-3"]],
                     [[["pdverify-tq-1"], ["pdverify-tq-0", "pdverify-tq-3"]]]), steps  # fmt: skip
    assert len(passes) == 1 and trace.queued == (2,), (passes, trace)  # #2, failed here but not agreed on, stays


def test_the_released_step_commits_a_transfer_another_stage_failed() -> None:
    """F11 as released (0.5.7-0.5.23): the step hands the pass good + bad as one list and the pass polls this stage's
    receivers - #0, failed on another stage and succeeded here, is committed; #3, failed here too, is aborted."""
    _pp_mixin()
    sg = _sglang()
    import inspect

    if "pp_good_rids" in inspect.signature(sg.DecodeTransferQueue.pop_transferred).parameters:
        pytest.skip("the release's pass takes the consensus lists (F11's fix applied)")
    trace = _target().require("transfer_queue")(PP_CASE, "cpu")
    assert (trace.committed, trace.aborted, trace.queued) == ((0, 1), (3,), (2,)), trace
