"""The pre-allocation and queue drivers run SGLang's own decode radix cache where the release matches through
``match_kv_cache`` (0.5.22 on; one full pool, the prefix on the device): ``UnifiedRadixCache`` holds the request's
prefix and the evictable sequences, ``pop_preallocated`` matches and locks through it, and its ``evict_for_alloc``
frees what the request lacks. D3 and D4 see a tree planted to evict a page too many, or to lock nothing; in the queue
(the queued requests' prefixes, one chain per adapter) Q2 sees a tree planted to lock nothing.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest

radix = pytest.importorskip("sglang.srt.mem_cache.unified_radix_cache", reason="needs SGLang (the conformance env)")


def _run(property_id: str, case: Any) -> None:
    from pdverify.runner import load_properties
    from tests.sglang_release import release_target

    test: Any = load_properties()[property_id].test
    test.hypothesis.inner_test(target=release_target(), device="cpu", case=case)  # the property's body, once


def _pressure() -> Any:
    """D3's explicit example: two free pages, six evictable one-page sequences, the request two pages short."""
    from pdverify.properties.test_decode_prealloc import EXAMPLES

    return replace(EXAMPLES[3], free_pages=(11, 62), evictable_pages=(38, 61, 48, 33, 50, 7))


def test_the_tree_is_sglangs_own_and_evicts_the_shortfall() -> None:
    from sglang.srt.disaggregation import decode

    from pdverify.targets.sglang_decode import _real_tree_answers

    case = _pressure()
    if not _real_tree_answers(decode, case):
        pytest.skip("this release matches through the stand-in tree (before 0.5.22)")
    calls: list[int] = []
    own = radix.UnifiedRadixCache.evict_for_alloc

    def counted(self: Any, params: Any) -> Any:
        calls.append(params.num_tokens)
        return own(self, params)

    with mock.patch.object(radix.UnifiedRadixCache, "evict_for_alloc", counted):
        _run("D3", case)
    assert calls, "SGLang's tree was not asked to evict"


def test_a_tree_evicting_a_page_too_many_or_locking_nothing_is_seen() -> None:
    from sglang.srt.disaggregation import decode

    from pdverify.targets.sglang_decode import _real_tree_answers

    case = _pressure()
    if not _real_tree_answers(decode, case):
        pytest.skip("this release matches through the stand-in tree (before 0.5.22)")
    own = radix.UnifiedRadixCache.evict_for_alloc

    def greedy(self: Any, params: Any) -> Any:
        return own(self, replace(params, num_tokens=params.num_tokens + case.page_size))

    with (
        mock.patch.object(radix.UnifiedRadixCache, "evict_for_alloc", greedy),
        pytest.raises(AssertionError, match=r"\(3 pages\), the request lacks 2"),
    ):
        _run("D3", case)
    # the prefix left unlocked: under pressure the tree's LRU eviction takes the request's own cached prefix
    with (
        mock.patch.object(radix.UnifiedRadixCache, "lock", lambda self, node: None),
        pytest.raises(AssertionError, match=r"evicted \[38, 40, 41\]"),  # one more, then the prefix (l1_row)
    ):
        _run("D3", replace(case, evictable_pages=(38,)))


def _lock_examples() -> tuple[Any, Any]:
    """The queue's explicit examples of the post-lock budget: one request whose lock leaves it 8 of the 9 tokens it
    needs, and three whose locks share pages."""
    from pdverify.properties.test_decode_queue import EXAMPLES

    alone = next(c for c in EXAMPLES if c.radix and c.token_budget == 16 and len(c.requests) == 1)
    shared = next(c for c in EXAMPLES if c.radix and c.token_budget == 29)
    return alone, shared


def test_the_queue_matches_and_locks_through_sglangs_tree() -> None:
    """The queue driver's radix cache is SGLang's own ``UnifiedRadixCache`` where the release matches through
    ``match_kv_cache`` (0.5.22 on, one full pool): the release's own match locks through it, and its evictable and
    protected sizes are what the release's budget reads."""
    from sglang.srt.disaggregation import decode

    from pdverify.targets.sglang_decode import _queue_tree_answers

    alone, shared = _lock_examples()
    if not _queue_tree_answers(decode, shared):
        pytest.skip("this release's queue locks through the lock book (before 0.5.22)")
    locked: list[Any] = []
    own = radix.UnifiedRadixCache.lock

    def counted(self: Any, node: Any, *args: Any) -> Any:
        lock = own(self, node, *args)
        locked.append(self.protected_size())
        return lock

    with mock.patch.object(radix.UnifiedRadixCache, "lock", counted):
        for prop in ("Q2", "Q5"):
            _run(prop, shared)
            _run(prop, alone)
    # Q2 then Q5 on the shared example: 2 pages, still 2 (the second lock's pages are the first's), then 3, of 4 tokens
    assert locked[:3] == [8, 8, 12], locked


def test_a_queue_tree_whose_locks_protect_nothing_is_seen() -> None:
    """On a tree planted to lock nothing, the release's budget keeps counting a matched prefix as evictable: Q2 sees
    a request admitted that its own lock would have left short."""
    from sglang.srt.disaggregation import decode

    from pdverify.targets.sglang_decode import _queue_tree_answers

    alone, _ = _lock_examples()
    if not _queue_tree_answers(decode, alone):
        pytest.skip("this release's queue locks through the lock book (before 0.5.22)")
    nothing = radix.IncLockRefResult()
    with (
        mock.patch.object(radix.UnifiedRadixCache, "inc_lock_ref", lambda self, node, *a: nothing),
        pytest.raises(AssertionError, match=r"admitted #0, expected none"),
    ):
        _run("Q2", alone)
