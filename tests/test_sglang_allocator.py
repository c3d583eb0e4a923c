"""On the ``sglang`` target M1 allocates both pools' pages with SGLang's own KV allocator, configured as a PD server
configures it (``need_sort``): freed pages wait in its release list and are sorted back in when an allocation runs
short, the order a PD server reuses pages in. M1 fails when the pages go back to SGLang's allocator twice (its
free count then exceeds the pool).

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("sglang.srt.managers.schedule_batch", reason="needs SGLang (the conformance env)")


def _m1(target: Any) -> Any:
    from pdverify.runner import load_properties, run_property

    return run_property(load_properties()["M1"], target)


def _target() -> Any:
    from tests.sglang_release import release_target

    return release_target()


def test_m1_pages_through_sglangs_own_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdverify.targets import sglang_allocator

    built: list[tuple[int, str]] = []
    own = sglang_allocator.SGLangPages.__init__

    def counting(self: Any, num_pages: int, page_size: int, free_order: Any) -> None:
        own(self, num_pages, page_size, free_order)
        built.append((page_size, type(self.own).__name__))

    monkeypatch.setattr(sglang_allocator.SGLangPages, "__init__", counting)
    target = _target()
    got = _m1(target)
    if got.status == "not applicable":
        pytest.skip(got.message)
    assert got.status == "passed", got.message
    assert built and {name for _, name in built} <= {"PagedTokenToKVPoolAllocator", "TokenToKVPoolAllocator"}
    assert {name for ps, name in built if ps > 1} == {"PagedTokenToKVPoolAllocator"}


def test_m1_fails_on_an_allocator_that_frees_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdverify.targets import sglang_allocator

    target = _target()
    if _m1(target).status == "not applicable":
        pytest.skip("M1 is not in this release's contract")
    own = sglang_allocator.SGLangPages.free

    def twice(self: Any, pages: Any) -> None:
        own(self, pages)
        own(self, pages)

    monkeypatch.setattr(sglang_allocator.SGLangPages, "free", twice)
    got = _m1(target)
    assert got.status == "failed" and "free_pages" in got.message, got.message  # SGLang now counts a page twice
