"""Q7's driver runs SGLang's own transfer queue: prefill's row written by the release's writer and copied by its
``send_aux``, decode's ``pop_transferred`` over its own ``MetadataBuffers`` and allocator. A row planted to land one
slot off, or the commit planted to read another token, makes Q7 fail; as released (0.5.9 on), room 0 is F8.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped where
SGLang is not installed or the release has no KV transport (0.4.4.post2-0.4.5).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

pytest.importorskip("sglang.srt.disaggregation.mooncake.conn", reason="needs SGLang with a KV transport")

from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager

from pdverify.model.transfer_queue import Transfer, TransferQueueCase

CASE = TransferQueueCase(
    transfers=(Transfer(room=2**31 - 2, decode_slot=2, prefill_slot=5, first_token=791),
               Transfer(room=17, decode_slot=0, prefill_slot=1, first_token=128009, poll="transferring"),
               Transfer(room=2**63 - 1, decode_slot=4, prefill_slot=3, first_token=9906, max_new_tokens=1)),
    slots=6,
)  # fmt: skip


def _target() -> Any:
    from pdverify.targets import load_target

    return load_target("sglang")


def _q7(case: TransferQueueCase) -> None:
    from pdverify.properties.test_transfer_queue import test_q7_transfer_queue_commits

    test_q7_transfer_queue_commits.hypothesis.inner_test(_target(), "cpu", case)  # type: ignore[attr-defined]


def test_the_pass_runs_sglangs_own_aux_transfer_and_pop_transferred() -> None:
    sends: list[int] = []
    passes: list[int] = []
    send_aux, pop = MooncakeKVManager.send_aux, decode.DecodeTransferQueue.pop_transferred

    def spy_send_aux(self: Any, *args: Any) -> Any:
        sends.append(args[1])  # prefill_aux_index in every form
        return send_aux(self, *args)

    def spy_pop(self: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append(len(self.queue))
        return pop(self, *args, **kwargs)

    with (
        mock.patch.object(MooncakeKVManager, "send_aux", spy_send_aux),
        mock.patch.object(decode.DecodeTransferQueue, "pop_transferred", spy_pop),
    ):
        trace = _target().require("transfer_queue")(CASE, "cpu")
    assert (sorted(sends), passes) == ([3, 5], [3]), (sends, passes)
    assert (trace.committed, trace.tokens, trace.queued, trace.freed) == ((0, 2), (791, 9906), (1,), (2, 4)), trace
    assert not trace.raised and not trace.aborted, trace


def test_q7_fails_when_the_aux_transfer_lands_in_another_slot() -> None:
    send_aux = MooncakeKVManager.send_aux

    def one_off(self: Any, *args: Any) -> Any:
        if hasattr(args[0], "dst_aux_index"):  # 0.5.1 on: the destination rides on the transfer info
            args[0].dst_aux_index = (args[0].dst_aux_index + 1) % CASE.slots
            return send_aux(self, *args)
        session, source, ptrs, destination = args
        return send_aux(self, session, source, ptrs, (destination + 1) % CASE.slots)

    _q7(CASE)
    with mock.patch.object(MooncakeKVManager, "send_aux", one_off), pytest.raises(AssertionError, match="committed"):
        _q7(CASE)


def test_q7_fails_when_a_failed_transfer_is_not_aborted() -> None:
    from pdverify.properties.releases import DOMAIN

    if not DOMAIN.has("transfer_failure_abort"):
        pytest.skip("the release raises on a failed transfer by design (before #6504)")
    case = TransferQueueCase(transfers=(*CASE.transfers, Transfer(room=5, decode_slot=5, prefill_slot=0,
                                                                  first_token=1, poll="failed")), slots=6)  # fmt: skip
    _q7(case)
    # the abort planted away: the failed request leaves the queue unaborted, its client never answered
    with (
        mock.patch.object(decode, "prepare_abort", lambda *a, **kw: None),
        pytest.raises(AssertionError, match="abort"),
    ):
        _q7(case)
