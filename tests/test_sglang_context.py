"""The decode drivers and the prefill exchange publish the server's configuration through SGLang's own runtime
context where the release has one (0.5.22 on): SGLang's ``ServerArgs`` defaults for a scheduler of the mode, the
case's leaves set through the bags' own ``override`` - which refuses a leaf the release does not have, where a
namespace stand-in took any name.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

decode = pytest.importorskip("sglang.srt.disaggregation.decode", reason="needs SGLang (the conformance env)")


def test_the_decode_flags_are_sglangs_own_configuration() -> None:
    from pdverify.targets.sglang_context import context
    from pdverify.targets.sglang_decode import _disagg, _published

    if context("decode") is None:
        pytest.skip("this release publishes no runtime context (before 0.5.22): the flags are patched in")
    flags = _disagg(radix=True)
    flags.disaggregation_decode_allocation_policy = "prefill_complete"
    with _published(decode, flags):
        disagg, memory = decode.get_disagg(), decode.get_memory()
        assert type(disagg).__name__ == "_ConfigBag"
        assert disagg.disaggregation_decode_enable_radix_cache is True
        assert disagg.disaggregation_decode_allocation_policy == "prefill_complete"
        assert memory.disable_radix_cache is False
        assert disagg.disaggregation_decode_polling_interval == 1  # a leaf the case leaves at the server's default


def test_the_prefill_exchange_reads_the_case_through_the_published_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 0.5.22 the exchange runs under SGLang's own context for a prefill scheduler: the case's chunked-prefill
    size reaches the release's code through the schedule bag alone (no patched getter), so S12 (the staging grid the
    size sets) fails when the published value is doubled and passes as published."""
    from pdverify.runner import load_properties, run_property
    from pdverify.targets import sglang_context, sglang_prefill
    from tests.sglang_release import release_target

    if sglang_context.context("prefill") is None:
        pytest.skip("this release publishes no runtime context (before 0.5.22): the flags are patched in")
    target = release_target()
    s12 = load_properties()["S12"]
    assert run_property(s12, target).status == "passed"
    own = sglang_context.published

    def doubled(mode: str, leaves: dict[str, dict[str, Any]]) -> Any:
        if "get_schedule" in leaves:
            leaves["get_schedule"] = {"chunked_prefill_size": 2 * leaves["get_schedule"]["chunked_prefill_size"]}
        return own(mode, leaves)

    monkeypatch.setattr(sglang_prefill, "published", doubled)
    assert run_property(s12, target).status == "failed"
