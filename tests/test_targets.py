"""Targets: the built-in ones hold every property they supply; deriving and loading behave."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pdverify.production import fast
from pdverify.properties.test_prebuilt import seed_batch
from pdverify.runner import load_properties, run_property
from pdverify.targets import FUNCTIONS, Target, TargetError, load_target
from pdverify.targets.layouts import PromptReadError, build_batch_object, run_prepare_for_prebuilt

PROPS = load_properties()


@pytest.mark.parametrize("pid", sorted(PROPS))
@pytest.mark.parametrize("name", ["fast", "pr35070"])
def test_builtin_targets_hold(name: str, pid: str) -> None:
    result = run_property(PROPS[pid], load_target(name))
    assert result.status in ("passed", "not applicable"), result.message


@pytest.mark.parametrize("name", ["pdverify", "pr35070", "fast"])
def test_seed_regression_through_both_layouts(name: str) -> None:
    target = load_target(name)
    out = run_prepare_for_prebuilt(target, seed_batch(), "cpu")
    assert out.fields["input_ids"] is None and out.fields["extend_num_tokens"] == 3
    assert out.fields["out_cache_loc"].tolist() == [2, 3, 4] and not out.prompt_reads
    assert target.layout in ("sglang-0.5.23", "sglang-pr35070")


def test_legacy_reads_the_prompt_through_the_seed_layout() -> None:
    out = run_prepare_for_prebuilt(load_target("legacy"), seed_batch(), "cpu")
    assert out.prompt_reads == ["get_fill_ids()"] and out.fields["input_ids"].tolist() == [2, 3, 4]


def test_derive_replaces_one_function() -> None:
    base = load_target("pdverify")
    derived = base.derive("floor-broken", page_align_floor=lambda n, ps: n)
    assert derived.page_align_floor is not base.page_align_floor
    assert derived.kv_to_page_indices is base.kv_to_page_indices and repr(derived) == "Target('floor-broken')"
    with pytest.raises(TargetError, match="unknown field"):
        base.derive("x", nonsense=1)
    with pytest.raises(TargetError, match="must be callable"):
        base.derive("x", page_align_floor=3)
    with pytest.raises(TargetError, match="unknown function"):
        base.supplies("frobnicate")
    assert load_target(base) is base
    assert [f for f in FUNCTIONS if not Target("empty").supplies(f)] == list(FUNCTIONS)


def test_factory_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.user_targets as mod

    def broken() -> Any:
        raise OSError("no device")

    monkeypatch.setattr(mod, "broken_factory", broken, raising=False)
    with pytest.raises(TargetError, match="calling broken_factory to build the target failed: no device"):
        load_target("tests.user_targets:broken_factory")


def test_unknown_layout() -> None:
    target = load_target("pdverify").derive("odd", layout="sglang-9.9")
    with pytest.raises(TargetError, match=r"unknown layout 'sglang-9\.9'"):
        run_prepare_for_prebuilt(target, seed_batch(), "cpu")


def test_target_without_sampling_path_runs_unpatched() -> None:
    target = load_target("pdverify").derive("unpatched", sampling_info_path=None)
    out = run_prepare_for_prebuilt(target, seed_batch(), "cpu")
    assert out.fields["sampling_info"].batch_size == 1 and out.sampling_info_calls == []


def test_fast_int32_guard() -> None:
    kv = torch.tensor([0, 1, 2, 3, 2**35, 2**35 + 1], dtype=torch.int64)
    with pytest.raises(ValueError, match="outside int32"):
        fast.kv_to_page_indices_int32(kv, 2)
    ok = fast.kv_to_page_indices_int32(torch.arange(8, dtype=torch.int64), 4)
    assert ok.dtype == np.int32 and ok.tolist() == [0, 1]


def test_fast_prebuilt_launches_do_not_grow_with_batch() -> None:
    from pdverify.model.batch import PrebuiltBatch, Request

    def batch(n: int) -> PrebuiltBatch:
        reqs = [Request(i, 4, 12, list(range(16))) for i in range(n)]
        return PrebuiltBatch(reqs, [list(range(100 * i, 100 * i + 16)) for i in range(n)])

    fast_t, port = load_target("fast"), load_target("pdverify")
    launches = {
        (t.name, n): len(run_prepare_for_prebuilt(t, batch(n), "cpu", measure=True).ledger.launches)
        for t in (fast_t, port)
        for n in (1, 64)
    }
    assert launches[("fast", 1)] == launches[("fast", 64)]
    assert launches[("pdverify", 64)] > launches[("pdverify", 1)]
    h2d = run_prepare_for_prebuilt(fast_t, batch(64), "cpu", measure=True).ledger
    assert next(c.elements for c in h2d.copies if c.direction == "H2D") == 4 * 64


def test_prompt_guard_records_and_refuses() -> None:
    from pdverify.production.prebuilt import prepare_for_prebuilt

    def peeks(batch: Any) -> None:
        for req in batch.reqs:
            _ = req.origin_input_ids[0], list(req.output_ids), req.fill_ids, req.full_untruncated_fill_ids
        prepare_for_prebuilt(batch)

    target = load_target("pdverify").derive("peeks", prepare_for_prebuilt=peeks)
    batch = seed_batch()
    batch.reqs[0].output_ids = [9]
    batch.reqs[0].extend_len = 3
    out = run_prepare_for_prebuilt(target, batch, "cpu")
    assert out.prompt_reads == ["origin_input_ids[0]", "output_ids iterated", "fill_ids", "full_untruncated_fill_ids"]
    with pytest.raises(PromptReadError, match=r"origin_input_ids\[0\]"):
        run_prepare_for_prebuilt(target, batch, "cpu", strict_prompt=True)
    duck, _ = build_batch_object(target, batch, "cpu")
    assert repr(duck.reqs[0].origin_input_ids) == "GuardedTokens(len=5)"


def test_legacy_value_properties_hold() -> None:
    """Before #31173 the values were the same: only P3 (aliasing) and the budgets tell legacy apart."""
    for pid in ("P1", "P2", "P4", "P9", "P10"):
        assert run_property(PROPS[pid], load_target("legacy")).status == "passed", pid


def test_fast_prebuilt_rejects_negative_extend_like_upstream() -> None:
    from pdverify.model.batch import PrebuiltBatch, Request

    batch = PrebuiltBatch([Request(0, 2, -1, [0] * 5, [1])], [[0] * 5])
    with pytest.raises(RuntimeError, match="negative dimension"):
        run_prepare_for_prebuilt(load_target("fast"), batch, "cpu")


def test_the_sampling_info_runs_as_itself_and_is_recorded() -> None:
    from pdverify.production.prebuilt import SamplingBatchInfo

    released = SamplingBatchInfo.__dict__["from_schedule_batch"]
    out = run_prepare_for_prebuilt(load_target("pdverify"), seed_batch(), "cpu", measure=True)
    info = out.fields["sampling_info"]
    assert isinstance(info, SamplingBatchInfo) and info is out.sampling_info_returned
    assert (info.batch_size, info.vocab_size) == (1, seed_batch().vocab_size)
    assert out.sampling_info_calls == [(out.batch_object, seed_batch().vocab_size)]
    assert SamplingBatchInfo.__dict__["from_schedule_batch"] is released  # put back after the run


def test_the_wrapped_sampling_info_is_put_back_after_an_error() -> None:
    from pdverify.production.prebuilt import SamplingBatchInfo

    released = SamplingBatchInfo.__dict__["from_schedule_batch"]

    def boom(batch: Any) -> None:
        SamplingBatchInfo.from_schedule_batch(batch, 7)
        raise RuntimeError("after the sampling info")

    target = load_target("pdverify").derive("raises", prepare_for_prebuilt=boom)
    with pytest.raises(RuntimeError, match="after the sampling info"):
        run_prepare_for_prebuilt(target, seed_batch(), "cpu")
    assert SamplingBatchInfo.__dict__["from_schedule_batch"] is released


def test_b3_bounds_the_sampling_infos_copies_on_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampling info's copies are set aside from prepare_for_prebuilt's own budget, not dropped: a sampling
    info that copies the prompt to the device fails B3 (what the port's copies, one element a request per tensor,
    passes)."""
    from pdverify.production.prebuilt import SamplingBatchInfo

    released = SamplingBatchInfo.from_schedule_batch

    def copying(cls: type[SamplingBatchInfo], batch: Any, vocab_size: int) -> SamplingBatchInfo:
        if copy_prompt:
            torch.tensor([t for r in batch.reqs for t in list(r.origin_input_ids)], device=batch.device)
        return released(batch, vocab_size)

    monkeypatch.setattr(SamplingBatchInfo, "from_schedule_batch", classmethod(copying))
    copy_prompt = False
    assert run_property(PROPS["B3"], load_target("pdverify")).status == "passed"
    copy_prompt = True
    run = run_property(PROPS["B3"], load_target("pdverify"))
    assert run.status == "failed" and "the sampling info's H2D budget" in run.message, run.message
