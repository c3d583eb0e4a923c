"""The decode queue driver's LoRA gate is SGLang's own ``Scheduler.can_schedule_lora_req`` (0.5.20 on), not a
re-implementation: a gate planted to let every adapter in makes T11's pattern show on a release that fixed it.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

scheduler = pytest.importorskip("sglang.srt.managers.scheduler", reason="needs SGLang (the conformance env)")


def test_the_queue_gate_is_sglangs_own() -> None:
    from pdverify.replay import load_examples, replay
    from pdverify.targets import load_target

    target = load_target("sglang")
    t11 = next(e for e in load_examples() if e.finding == "T11")
    assert replay(t11, target, "fixed").outcome == "passed"

    def every_adapter(self: Any, req: Any, running_loras: set[Any]) -> bool:
        return True

    with mock.patch.object(scheduler.Scheduler, "can_schedule_lora_req", every_adapter):
        planted = replay(t11, target, "fixed")
    assert planted.outcome == "reproduced", planted
    assert planted.message.startswith("admitted #0, #1, #2, expected #0, #2")
