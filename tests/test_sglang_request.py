"""On the ``sglang`` target, ``prepare_for_prebuilt`` reads SGLang's own ``Req``: built by the release's
constructor, its ``ReqKvInfo`` and ``ReqLogprob`` (0.5.22 on) its own, ``extend_len`` computed by it. The prompt
guard sees a read through the release's own ``get_fill_ids`` and through the prompt's alias
``origin_input_ids_unpadded``, so P22 and P22b fail on a preparation planted to make either read.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

schedule_batch = pytest.importorskip("sglang.srt.managers.schedule_batch", reason="needs SGLang (the conformance env)")


def _target() -> Any:
    from tests.sglang_release import release_target

    return release_target()


def test_the_requests_are_sglangs_own() -> None:
    from pdverify.properties.test_prebuilt import seed_batch
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    out = run_prepare_for_prebuilt(_target(), seed_batch(), "cpu", strict_prompt=True)
    req = out.batch_object.reqs[0]
    assert isinstance(req, schedule_batch.Req)
    if hasattr(schedule_batch, "ReqKvInfo"):
        assert isinstance(req.kv, schedule_batch.ReqKvInfo) and isinstance(req.logprob, schedule_batch.ReqLogprob)
    assert req.extend_len == seed_batch().reqs[0].extend_len
    assert out.fields["out_cache_loc"].tolist() == [2, 3, 4] and out.prompt_reads == []


@pytest.mark.parametrize(("pid", "how", "seen"), [("P22", "get_fill_ids", "get_fill_ids()"),
                                                  ("P22b", "alias", "origin_input_ids_unpadded")])  # fmt: skip
def test_a_planted_prompt_read_through_the_real_request_fails(pid: str, how: str, seen: str) -> None:
    from pdverify.runner import load_properties, run_property

    target = _target()
    release_prepare = target.prepare_for_prebuilt

    def prepare(batch: Any) -> None:
        for req in batch.reqs:
            _ = req.get_fill_ids() if how == "get_fill_ids" else req.origin_input_ids_unpadded[0]
        release_prepare(batch)

    props = load_properties()
    released = run_property(props[pid], target).status
    if released == "not applicable":
        pytest.skip(f"{pid} is not in sglang {target.release}'s contract")
    assert released == "passed"
    got = run_property(props[pid], target.derive(f"reads-{how}", prepare_for_prebuilt=prepare))
    assert got.status == "failed" and seen in got.message, got.message


@pytest.mark.parametrize("pid", ["S9", "Q2", "K2", "P9"])
def test_the_scheduler_drivers_hand_sglang_its_own_requests(pid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From 0.5.22 (``owns_request_layout``) the prefill exchange, the decode queue, the bootstrap unit (K2) and the
    function-level ``send_kv_chunk`` unit (P9) build SGLang's own ``Req`` (its ``ReqKvInfo``, time stats and
    defaults) where namespaces stood; before, the namespaces of each era stay."""
    from pdverify.runner import load_properties, run_property
    from pdverify.targets.sglang_request import owns_request_layout

    built: list[Any] = []
    init = schedule_batch.Req.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(type(self))
        init(self, *args, **kwargs)

    monkeypatch.setattr(schedule_batch.Req, "__init__", counting)
    got = run_property(load_properties()[pid], _target())
    assert got.status == "passed", got.message
    assert (len(built) >= got.examples > 0) == owns_request_layout(), (len(built), got.examples)
