"""On the ``sglang`` target, ``prepare_for_prebuilt`` reads SGLang's own ``Req``: built by the release's
constructor, its ``ReqKvInfo`` and ``ReqLogprob`` (0.5.22 on) its own, ``extend_len`` computed by it. The prompt
guard sees a read through the release's own ``get_fill_ids`` and through the prompt's alias
``origin_input_ids_unpadded``, so P22 and P22b fail on a preparation planted to make either read.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

schedule_batch = pytest.importorskip("sglang.srt.managers.schedule_batch", reason="needs SGLang (the conformance env)")


def _target() -> Any:
    from tests.sglang_release import release_target

    return release_target()


def test_the_requests_are_sglangs_own() -> None:
    from pdverify.properties.releases import FROM_35070
    from pdverify.properties.test_prebuilt import seed_batch
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    target = _target()
    if (outside := FROM_35070.not_applicable(target.release)) is not None:
        pytest.skip(f"its expectations (no prompt read, the worked example's out_cache_loc) are #35070's: {outside}")
    out = run_prepare_for_prebuilt(target, seed_batch(), "cpu", strict_prompt=True)
    req = out.batch_object.reqs[0]
    assert isinstance(req, schedule_batch.Req)
    # the release's ReqKvInfo holds the row from 0.5.19 (in 0.5.16-0.5.18 it holds only the allocated lengths)
    if "req_pool_idx" in getattr(getattr(schedule_batch, "ReqKvInfo", None), "__annotations__", {}):
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


@pytest.mark.parametrize("pid", ["S9", "Q2", "K2", "P9", "D1"])
def test_the_scheduler_drivers_hand_sglang_its_own_requests(pid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefill exchange (S9), the decode queue (Q2), the bootstrap unit (K2), the function-level ``send_kv_chunk``
    unit (P9) and the pre-allocation driver (D1) build SGLang's own ``Req`` in every release (its KV bookkeeping,
    time stats and defaults; the prompt in the type the release takes), where namespaces of each era's fields stood.
    """
    from pdverify.properties.registry import EXAMPLES
    from pdverify.runner import load_properties, run_property

    target = _target()
    built: list[Any] = []
    init = schedule_batch.Req.__init__

    @functools.wraps(init)  # the drivers read the constructor's signature
    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(type(self))
        init(self, *args, **kwargs)

    monkeypatch.setattr(schedule_batch.Req, "__init__", counting)
    got = run_property(load_properties()[pid], target)
    if got.status == "not applicable":
        pytest.skip(f"{pid} is not in sglang {target.release}'s contract")
    assert got.status == "passed", got.message  # a recorded finding's failures are set aside
    # an example outside the release's domain, or refused by its server, is discarded before any driver runs
    ran = got.examples - EXAMPLES.outside - EXAMPLES.refused
    assert len(built) >= ran > 0, (len(built), ran)


def test_the_prompt_is_of_the_type_the_release_takes() -> None:
    """From 0.5.13 SGLang's ``Req`` takes the prompt as an int64 ``array`` (the tokenizer's), a list before: the
    drivers hand it over in the release's own type, whose ``origin_input_ids + output_ids`` the queue computes."""
    from array import array

    from pdverify.targets.sglang_request import release_request

    req = release_request("r0", [1, 2, 3])
    takes_array = "array" in str(schedule_batch.Req.__init__.__annotations__.get("origin_input_ids", ""))
    assert isinstance(req.origin_input_ids, array if takes_array else list), type(req.origin_input_ids)
    assert list(req.origin_input_ids) == [1, 2, 3]
