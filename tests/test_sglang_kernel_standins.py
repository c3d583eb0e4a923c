"""The CPU stand-ins for SGLang's Triton kernels agree with SGLang's own torch-native code for the same kernel.

``AllocExtendKernel`` stands in for ``alloc_extend_kernel`` on releases whose paged allocator has no CPU path
(0.5.21 and before); from 0.5.22 SGLang ships ``alloc_extend_naive``, its own CPU version of that kernel, which is
the reference here. Runs in the conformance environment (``.venv-sglang``); skipped where SGLang is not installed.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdverify.targets.sglang_decode import AllocExtendKernel

Batch = tuple[int, list[int], list[int], list[int], list[int]]

paged = pytest.importorskip("sglang.srt.mem_cache.allocator.paged", reason="needs SGLang (the conformance env)")


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """A page size, 1..4 requests each with a prefix and a longer or equal sequence, the last slot of each prefix
    (on a page the request holds, at the prefix's offset in it) and enough distinct free pages for every one."""
    ps = draw(st.sampled_from([1, 2, 3, 4, 16]))
    k = draw(st.integers(1, 4))
    pre = [draw(st.integers(0, 40)) for _ in range(k)]
    seq = [p + draw(st.integers(0, 40)) for p in pre]
    need = sum(-(-q // ps) - -(-p // ps) for p, q in zip(pre, seq, strict=True))
    free = draw(st.permutations(list(range(100, 100 + need + draw(st.integers(0, 3))))))
    last = [draw(st.integers(1, 90)) * ps + (p - 1) % ps if p else -1 for p in pre]
    return ps, pre, seq, last, list(free)


@settings(max_examples=300, deadline=None)
@given(batches())
def test_alloc_extend_stand_in_matches_sglangs_own_cpu_path(batch: Batch) -> None:
    ps, pre, seq, last, free = batch
    if not hasattr(paged, "alloc_extend_naive"):
        pytest.skip("this release has no alloc_extend_naive to compare with")
    args = [torch.tensor(v, dtype=torch.int64) for v in (pre, seq, last, free)]
    n = sum(q - p for p, q in zip(pre, seq, strict=True))
    want = torch.full((n,), -7, dtype=torch.int64)
    paged.alloc_extend_naive(*args, want, ps, "cpu")
    new_pages = sum(-(-q // ps) - -(-p // ps) for p, q in zip(pre, seq, strict=True))
    # each release's constants after out_indices: (bs_upper, page_size) from 0.5.19 on; (bs_upper, page_size,
    # max_num_extend_tokens) before; to 0.5.1 ret_values first, which the kernel fills with (pages << 32 | tokens)
    for form in ("current", "max_extend", "ret_values"):
        got = torch.full((n,), -7, dtype=torch.int64)
        ret = torch.empty((), dtype=torch.int64)
        meta = {"current": (4, ps), "max_extend": (4, ps, 64), "ret_values": (ret, 4, ps, 64)}[form]
        AllocExtendKernel()[(len(pre),)](*args, got, *meta)
        assert got.tolist() == want.tolist(), (form, ps, pre, seq, last, free)
        if form == "ret_values":
            assert int(ret) == new_pages << 32 | n, (int(ret), new_pages, n)
