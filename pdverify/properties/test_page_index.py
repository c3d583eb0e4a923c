"""Properties P1-P8: the page-index helpers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import example
from hypothesis import strategies as st

from pdverify.model.layout import PagedRow, build_req_to_token
from pdverify.oracle import page_index as oracle
from pdverify.properties.compare import NUMPY_OF, assert_host_indices, assert_int
from pdverify.properties.registry import FROM_31173, note_event, prop
from pdverify.strategies import index_dtypes, page_sizes, paged_rows, token_index_lists
from pdverify.targets import Target


def _label(ps: int, n: int) -> None:
    note_event(f"page_size={ps}" if ps in (1,) else ("n < page_size" if n < ps else "n >= page_size"))
    if n % ps:
        note_event("partial last page")


@example(values=[], ps=4, dtype=torch.int32)
@example(values=[5, 6, 7], ps=1, dtype=torch.int32)
@example(values=[20, 21, 22], ps=4, dtype=torch.int32)
@example(values=[20, 21, 22, 23, 8, 9, 10, 11], ps=4, dtype=torch.int64)
@prop(
    "P1",
    "kv_to_page_indices == x[::ps] // ps: a host array, input dtype, ceil(n/ps) long",
    needs=("kv_to_page_indices",),
    values=token_index_lists(),
    ps=page_sizes(),
    dtype=index_dtypes(),
)
def test_p1_page_formula(target: Target, device: str, values: list[int], ps: int, dtype: torch.dtype) -> None:
    _label(ps, len(values))
    kv = torch.tensor(values, dtype=dtype, device=device)
    result = target.require("kv_to_page_indices")(kv, ps)
    assert_host_indices("kv_to_page_indices", result, oracle.strided_pages(values, ps), NUMPY_OF[dtype])


@example(row=PagedRow((5, 2, 9), 10, 4, 4), dtype=torch.int32)
@example(row=PagedRow((3,), 4, 4, 4), dtype=torch.int32)
@prop(
    "P2",
    "on a page-aligned slice of a paged row: the distinct pages in first-appearance order, covering every token",
    needs=("kv_to_page_indices",),
    row=paged_rows(),
    dtype=index_dtypes(),
)
def test_p2_paged_slices(target: Target, device: str, row: PagedRow, dtype: torch.dtype) -> None:
    locs = row.locations
    suffix = locs[row.prefix_len :]
    _label(row.page_size, len(suffix))
    kv = torch.tensor(locs, dtype=dtype, device=device)[row.prefix_len :]
    result = target.require("kv_to_page_indices")(kv, row.page_size)
    expected = oracle.distinct_pages(suffix, row.page_size)
    assert_host_indices("kv_to_page_indices", result, expected, NUMPY_OF[dtype])
    held = set(result.tolist())
    for position, loc in enumerate(suffix):
        assert loc // row.page_size in held, f"token {position} (location {loc}) lies in no returned page"


@example(values=[7, 8, 9], dtype=torch.int32)
@example(values=[], dtype=torch.int64)
@prop(
    "P3",
    "page_size 1 is the identity on values and returns a fresh array sharing no memory with the input",
    contract=FROM_31173,
    needs=("kv_to_page_indices",),
    values=token_index_lists(max_size=64),
    dtype=index_dtypes(),
)
def test_p3_page_size_one_fresh(target: Target, device: str, values: list[int], dtype: torch.dtype) -> None:
    kv = torch.tensor(values, dtype=dtype, device=device)
    result = target.require("kv_to_page_indices")(kv, 1)
    assert_host_indices("kv_to_page_indices(ps=1)", result, values, NUMPY_OF[dtype])
    if kv.device.type == "cpu":
        assert not np.shares_memory(result, kv.numpy()), "the result aliases the input tensor's memory"
    before = list(values)
    result[...] = -1  # writing the result must never reach the input
    assert kv.tolist() == before, "writing the result changed the input tensor"


@example(row=PagedRow((5, 2, 9), 10, 4, 4), seq=10, extra_rows=0)
@example(row=PagedRow((5, 2, 9), 10, 4, 8), seq=8, extra_rows=1)
@prop(
    "P4",
    "suffix_page_indices(t, pool, D, seq, ps) == the pages of row[D:seq] == P(row, 0, seq)[D/ps:]",
    needs=("suffix_page_indices",),
    row=paged_rows(),
    seq=st.integers(0, 2048),
    extra_rows=st.integers(0, 3),
)
def test_p4_suffix_pages(target: Target, device: str, row: PagedRow, seq: int, extra_rows: int) -> None:
    seq = max(row.prefix_len, min(seq, row.length))
    rows = [[1] * row.length] * extra_rows + [row.locations]
    table = build_req_to_token(rows, row.length + 3, device=device)
    result = target.require("suffix_page_indices")(table, extra_rows, row.prefix_len, seq, row.page_size)
    expected = oracle.suffix_pages(row.locations, row.prefix_len, seq, row.page_size)
    assert_host_indices("suffix_page_indices", result, expected, np.dtype(np.int32))
    whole = oracle.suffix_pages(row.locations, 0, seq, row.page_size)
    assert expected == whole[row.prefix_len // row.page_size :]


@example(n=0, ps=1)
@example(n=5, ps=4)
@example(n=8, ps=4)
@example(n=3, ps=4)
@prop(
    "P5",
    "kv_to_page_num(n, ps) == ceil(n/ps); monotone in n; k*ps -> k",
    needs=("kv_to_page_num",),
    n=st.integers(0, 1 << 20),
    ps=page_sizes(),
)
def test_p5_page_num(target: Target, device: str, n: int, ps: int) -> None:
    fn = target.require("kv_to_page_num")
    assert_int(f"kv_to_page_num({n}, {ps})", fn(n, ps), oracle.page_count(n, ps))
    assert fn(n, ps) <= fn(n + 1, ps), "kv_to_page_num is not monotone"
    k = n // ps
    assert_int(f"kv_to_page_num({k * ps}, {ps})", fn(k * ps, ps), k)


@example(n=0, ps=4)
@example(n=9, ps=4)
@example(n=3, ps=4)
@example(n=7, ps=1)
@prop(
    "P6",
    "page_align_floor(n, ps) == n - n % ps: <= n, aligned, idempotent, > n - ps",
    needs=("page_align_floor",),
    n=st.integers(0, 1 << 20),
    ps=page_sizes(),
)
def test_p6_align_floor(target: Target, device: str, n: int, ps: int) -> None:
    fn = target.require("page_align_floor")
    got = fn(n, ps)
    assert_int(f"page_align_floor({n}, {ps})", got, oracle.align_floor(n, ps))
    assert got <= n and got % ps == 0 and got > n - ps
    assert fn(got, ps) == got, "page_align_floor is not idempotent"


@example(row=PagedRow((5, 2, 9), 10, 4, 4), misalign=0)
@example(row=PagedRow((5, 2, 9), 10, 4, 4), misalign=2)
@example(row=PagedRow((5,), 1, 1, 1), misalign=1)  # aligned but past the end
@prop(
    "P7",
    "minimax_index_transfer_pages: the suffix pages for an aligned prefix, ValueError otherwise",
    needs=("minimax_index_transfer_pages",),
    row=paged_rows(),
    misalign=st.integers(0, 3),
)
def test_p7_minimax(target: Target, device: str, row: PagedRow, misalign: int) -> None:
    fn = target.require("minimax_index_transfer_pages")
    kv = torch.tensor(row.locations, dtype=torch.int32, device=device)
    prefix = row.prefix_len + misalign
    in_contract = prefix <= row.length and prefix % row.page_size == 0
    if in_contract:
        result = fn(kv, page_size=row.page_size, prefix_len=prefix)
        expected = oracle.suffix_pages(row.locations, prefix, row.length, row.page_size)
        assert_host_indices("minimax_index_transfer_pages", result, expected, np.dtype(np.int32))
    else:
        note_event("minimax rejects")
        _expect_value_error(fn, kv, row.page_size, prefix)
    for bad_page_size in (0, -row.page_size):  # its guard covers page_size <= 0 too
        _expect_value_error(fn, kv, bad_page_size, row.prefix_len)


def _expect_value_error(fn: Any, kv: torch.Tensor, page_size: int, prefix: int) -> None:
    try:
        fn(kv, page_size=page_size, prefix_len=prefix)
    except ValueError:
        return
    raise AssertionError(f"prefix_len={prefix}, page_size={page_size} (length {len(kv)}) was accepted")


@example(values=[20, 21, 22, 23, 8], ps=4)
@prop(
    "P8",
    "length == kv_to_page_num(n); same values as the inline device path kv[::ps] // ps (Mooncake)",
    needs=("kv_to_page_indices", "kv_to_page_num"),
    values=token_index_lists(),
    ps=page_sizes(),
)
def test_p8_count_and_device_path(target: Target, device: str, values: list[int], ps: int) -> None:
    kv = torch.tensor(values, dtype=torch.int64, device=device)
    result = target.require("kv_to_page_indices")(kv, ps)
    count = target.require("kv_to_page_num")(len(values), ps)
    assert len(result) == count == oracle.page_count(len(values), ps), (
        f"{len(result)} pages returned, kv_to_page_num says {count}, ceil says {oracle.page_count(len(values), ps)}"
    )
    inline = [values[i] // ps for i in range(0, len(values), ps)]
    assert result.tolist() == inline
