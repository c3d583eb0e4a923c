"""The decode drivers publish the server's configuration through SGLang's own runtime context where the release has
one (0.5.22 on): SGLang's ``ServerArgs`` defaults for a decode scheduler, the case's leaves set through the bags'
own ``override`` - which refuses a leaf the release does not have, where a namespace stand-in took any name.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

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
