"""Faults in the page-index helpers."""

from __future__ import annotations

import numpy as np
import torch

from pdverify.mutants.catalogue import mutant
from pdverify.production.page_index import PageIndices


@mutant("KV01", "kv_to_page_indices", "off-by-one slice", "strides from position 1 instead of 0")
def kv_start_at_one(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return (kv_indices[1::page_size] // page_size).cpu().numpy()


@mutant("KV02", "kv_to_page_indices", "wrong divisor", "strides but forgets to divide: token locations, not pages")
def kv_no_divide(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return kv_indices[::page_size].cpu().numpy()


@mutant("KV03", "kv_to_page_indices", "wrong stride", "strides by page_size + 1")
def kv_wrong_stride(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return (kv_indices[:: page_size + 1] // page_size).cpu().numpy()


@mutant("KV04", "kv_to_page_indices", "wrong dtype", "narrows every result to int32")
def kv_always_int32(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return (kv_indices[::page_size] // page_size).to(torch.int32).cpu().numpy()


@mutant("KV05", "kv_to_page_indices", "transfer before stride", "copies every token index to the host, then strides")
def kv_copy_first(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    host: PageIndices = kv_indices.cpu().numpy()
    return host[::page_size] // page_size


@mutant("KV06", "kv_to_page_indices", "aliasing copy", "page_size 1 shortcut returns a view of the input")
def kv_alias(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    if page_size == 1:
        return kv_indices.cpu().numpy()
    return (kv_indices[::page_size] // page_size).cpu().numpy()


@mutant("KV07", "kv_to_page_indices", "off-by-page slice", "drops a partial last page")
def kv_drop_partial(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    whole = len(kv_indices) - len(kv_indices) % page_size
    return (kv_indices[:whole:page_size] // page_size).cpu().numpy()


@mutant("KV08", "kv_to_page_indices", "wrong result type", "returns the host tensor, not a numpy array")
def kv_tensor_result(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return (kv_indices[::page_size] // page_size).cpu()  # type: ignore[return-value]


@mutant("KV09", "kv_to_page_indices", "reordered result", "returns the distinct pages sorted")
def kv_sorted(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return np.sort((kv_indices[::page_size] // page_size).cpu().numpy())


@mutant("KV10", "kv_to_page_indices", "wrong dtype", "true division: float pages")
def kv_true_div(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    return (kv_indices[::page_size] / page_size).cpu().numpy()


@mutant("SP01", "suffix_page_indices", "dropped guard", "ignores the prefix: pages from token 0")
def suffix_from_zero(
    req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int
) -> PageIndices:
    return (req_to_token[req_pool_idx, :seq_len][::page_size] // page_size).cpu().numpy()


@mutant("SP02", "suffix_page_indices", "off-by-one slice", "stops one token early")
def suffix_short(
    req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int
) -> PageIndices:
    return (req_to_token[req_pool_idx, prefix_len : seq_len - 1][::page_size] // page_size).cpu().numpy()


@mutant("SP03", "suffix_page_indices", "offset in the wrong unit", "the prefix taken in pages, not tokens")
def suffix_prefix_pages(
    req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int
) -> PageIndices:
    start = prefix_len // page_size
    return (req_to_token[req_pool_idx, start:seq_len][::page_size] // page_size).cpu().numpy()


@mutant("SP04", "suffix_page_indices", "wrong source", "reads row 0 instead of the request's row")
def suffix_row_zero(
    req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int
) -> PageIndices:
    return (req_to_token[0, prefix_len:seq_len][::page_size] // page_size).cpu().numpy()


@mutant("PN01", "kv_to_page_num", "dropped ceiling", "floor division: a partial page is not counted")
def page_num_floor(num_kv_indices: int, page_size: int) -> int:
    return num_kv_indices // page_size


@mutant("PN02", "kv_to_page_num", "off-by-one", "always one page more")
def page_num_plus_one(num_kv_indices: int, page_size: int) -> int:
    return (num_kv_indices + page_size) // page_size


@mutant("PN03", "kv_to_page_num", "wrong divisor", "rounds with page_size - 1")
def page_num_minus(num_kv_indices: int, page_size: int) -> int:
    return (num_kv_indices + page_size - 1) // max(1, page_size - 1)


@mutant("AF01", "page_align_floor", "wrong rounding", "rounds up instead of down")
def align_ceil(length: int, page_size: int) -> int:
    return -(-length // page_size) * page_size


@mutant("AF02", "page_align_floor", "offset in the wrong unit", "returns the page count, not the token boundary")
def align_pages(length: int, page_size: int) -> int:
    return length // page_size


@mutant("AF03", "page_align_floor", "off-by-page", "one page too low when already aligned")
def align_low(length: int, page_size: int) -> int:
    return ((length - 1) // page_size) * page_size if length else 0


@mutant("MM01", "minimax_index_transfer_pages", "dropped guard", "accepts a misaligned prefix")
def minimax_no_align(token_indices: torch.Tensor, *, page_size: int, prefix_len: int) -> PageIndices:
    if page_size <= 0 or not 0 <= prefix_len <= len(token_indices):
        raise ValueError("MiniMax transfer prefix must be in range")
    return (token_indices[prefix_len:][::page_size] // page_size).cpu().numpy()


@mutant("MM02", "minimax_index_transfer_pages", "off-by-one guard", "rejects a prefix equal to the length")
def minimax_strict(token_indices: torch.Tensor, *, page_size: int, prefix_len: int) -> PageIndices:
    if page_size <= 0 or not 0 <= prefix_len < len(token_indices) or prefix_len % page_size:
        raise ValueError("MiniMax transfer prefix must be in range and page-aligned")
    return (token_indices[prefix_len:][::page_size] // page_size).cpu().numpy()
