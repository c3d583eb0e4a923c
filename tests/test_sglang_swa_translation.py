"""Both sides' SWA lists on the ``sglang`` target go through SGLang's own full-to-SWA translation.

Prefill: the request's SWA pool (``PrefillCase.swa_pages``) is an ``SWAKVPool`` holding the full-to-SWA map under
SGLang's own ``SWATokenToKVPoolAllocator.translate_swa_indices_for_transfer``, or on a unified pool SGLang's own
``UnifiedSWATokenToKVPoolAllocator`` over its SWA sub-pool's page table. P15 passes as released and fails with either
translation planted as the identity (the window sent as full-pool pages), so the real translation is on its path.

Decode: every hybrid SWA case (``DecodeCase.swa_free_pages``: tail pre-allocation or the whole sequence) runs on
SGLang's own ``SWATokenToKVPoolAllocator`` over an ``SWAKVPool``; D1 reads what the SWA buffer holds from the
allocator's map and fails when the pool's translation is planted as the identity.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped where
SGLang is not installed.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

pool_module = pytest.importorskip("sglang.srt.mem_cache.swa_memory_pool", reason="needs SGLang (the conformance env)")


def _p15() -> tuple[Any, Any]:
    from tests.sglang_release import passing_as_released

    return passing_as_released("P15", "state payloads came in 0.5.3.post3")


def _fails(target: Any, p15: Any) -> None:
    """P15 fails on an SWA list (a planted translation is taken only by its own kind of pool: an ``SWAKVPool`` where
    the case has no page table, the unified allocator where it has one)."""
    from pdverify.runner import run_property

    got = run_property(p15, target)
    assert got.status == "failed" and "SWA state list" in got.message, got.message


def test_an_swa_pool_translating_nothing_fails_p15(monkeypatch: pytest.MonkeyPatch) -> None:
    target, p15 = _p15()
    monkeypatch.setattr(pool_module.SWAKVPool, "translate_loc_from_full_to_swa", lambda self, kv: kv)
    _fails(target, p15)


def test_a_unified_swa_sub_pool_translating_nothing_fails_p15(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        unified = importlib.import_module("sglang.srt.mem_cache.allocator.unified_hybrid_swa")
    except ImportError:
        pytest.skip("the release has no unified hybrid SWA pool")
    target, p15 = _p15()
    allocator = unified.UnifiedSWATokenToKVPoolAllocator
    monkeypatch.setattr(allocator, "translate_swa_indices_for_transfer", lambda self, kv: kv)
    _fails(target, p15)


def test_decode_swa_lists_translating_nothing_fail_d1(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdverify.runner import load_properties, run_property
    from tests.sglang_release import release_target

    target, d1 = release_target(), load_properties()["D1"]
    released = run_property(d1, target)
    if released.status == "not applicable":
        pytest.skip(f"D1 is not in sglang {target.release}'s contract")
    assert released.status in ("passed", "known defect"), released.message  # F1 is D1's on 0.5.19 on
    monkeypatch.setattr(pool_module.SWAKVPool, "translate_loc_from_full_to_swa", lambda self, kv: kv)
    got = run_property(d1, target)
    assert got.status == "failed" and "SWA list" in got.message, got.message
