"""The decode queue driver polls the queued KV receivers through SGLang's own ``_update_handshake_waiters`` (and
``poll_and_all_reduce`` over a one-rank gloo group), not an override: planted with 0.5.12's early return (no polling
while every queued receiver is ready) or with a failed poll ignored, the release fails T23's and T24's examples;
as released it passes them (both fixed, #25561 and #37483).

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

decode = pytest.importorskip("sglang.srt.disaggregation.decode", reason="needs SGLang (the conformance env)")


def _examples() -> list[Any]:
    from pdverify.replay import load_examples

    return [e for e in load_examples() if e.finding in ("T23", "T24") and e.shape == "production"]


def test_the_handshake_is_sglangs_own() -> None:
    from pdverify.replay import replay
    from pdverify.targets import load_target

    target = load_target("sglang")
    real = decode.DecodePreallocQueue._update_handshake_waiters

    def early_return(self: Any, *args: Any, **kw: Any) -> None:
        if all(d.waiting_for_input for d in self.queue):  # 0.5.12's early return (0.5.13-0.5.19 also test aborts)
            return
        real(self, *args, **kw)

    def failures_ignored(self: Any, *args: Any, **kw: Any) -> None:
        """Every poll read as it is, but a failed one as still bootstrapping."""
        for d in self.queue:
            d.kv_receiver.poll = lambda r=d.kv_receiver, own=d.kv_receiver.poll: (
                int(decode.KVPoll.Bootstrapping) if own() == int(decode.KVPoll.Failed) else own()
            )
        real(self, *args, **kw)

    examples = _examples()
    assert {e.finding for e in examples} == {"T23", "T24"}
    for example in examples:
        assert replay(example, target, "fixed").outcome == "passed", example.finding
        for plant in (early_return, failures_ignored):
            with mock.patch.object(decode.DecodePreallocQueue, "_update_handshake_waiters", plant):
                planted = replay(example, target, "fixed")
            # a failure (explained as the finding only where the plant is the release form the finding's
            # explanation replays for the bound release: T24's on 0.5.23)
            assert planted.outcome in ("reproduced", "failed"), (example.finding, plant.__name__, planted)
            assert planted.message.startswith("failed none, expected #"), planted.message
