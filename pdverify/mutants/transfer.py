"""Faults in the PD page selection: prefill's chunk sender and decode's destination list."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from pdverify.mutants.catalogue import mutant
from pdverify.production.page_index import kv_to_page_indices
from pdverify.production.transfer import KvChunk, PrefillSendState, WireIndices

Sent = tuple[KvChunk | None, PrefillSendState]


def _chunk(
    req_to_token: torch.Tensor,
    state: PrefillSendState,
    extend_end: int,
    last_chunk: bool,
    page_size: int,
    *,
    align_non_last: bool = True,
    align_last: bool = False,
    skip_backwards: bool = True,
    advance_start: bool = True,
    send_empty_last: bool = True,
    offset_unit_tokens: bool = False,
    offset_bump: int = 0,
) -> Sent:
    """The chunk loop with one rule switchable, so each mutant states its single fault by keyword."""
    start = state.start_send_idx
    end = min(extend_end, state.origin_len)
    if (align_non_last and not last_chunk) or (align_last and last_chunk):
        end -= end % page_size
    if skip_backwards and end < start:
        return None, state
    pages = kv_to_page_indices(req_to_token[state.req_pool_idx, start:end], page_size)
    sent = replace(state, start_send_idx=end) if advance_start else state
    if len(pages) == 0 and (not last_chunk or not send_empty_last):
        return None, sent
    offset = (start - state.decode_prefix_len) if offset_unit_tokens else state.curr_idx
    if state.curr_idx > 0:
        offset += offset_bump
    curr = state.curr_idx + len(pages)
    return KvChunk(pages, offset, start, end, curr == state.num_pages), replace(sent, curr_idx=curr)


@mutant("SC01", "send_kv_chunk", "dropped guard", "a non-last chunk also sends its partial page (sent twice)")
def send_partial(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, align_non_last=False)


@mutant("SC02", "send_kv_chunk", "field left unset", "start_send_idx not advanced after a send")
def send_no_advance(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, advance_start=False)


@mutant("SC03", "send_kv_chunk", "off-by-page offset", "destination offset one page too far after the first chunk")
def send_offset_bump(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, offset_bump=1)


@mutant("SC04", "send_kv_chunk", "dropped guard", "a zero-page last chunk is not sent (decode full-prefix hit hangs)")
def send_no_empty_last(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, send_empty_last=False)


@mutant("SC05", "send_kv_chunk", "dropped guard", "no end < start guard: start_send_idx can move backwards")
def send_backwards(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, skip_backwards=False)


@mutant("SC06", "send_kv_chunk", "off-by-page slice", "the last chunk's partial page is dropped")
def send_drop_last_partial(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, align_last=True)


@mutant("SC07", "send_kv_chunk", "offset in the wrong unit", "destination offset counted in tokens, not pages")
def send_token_offset(
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> Sent:
    return _chunk(req_to_token, state, extend_end, last_chunk, page_size, offset_unit_tokens=True)


@mutant("DP01", "decode_page_indices", "wrong dtype", "int64 on the wire (translated indices, cast dropped)")
def decode_int64(
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> WireIndices:
    kv = req_to_token[req_pool_idx][decode_prefix_len:origin_input_len].to(torch.int64)
    return kv_to_page_indices(kv, page_size)  # type: ignore[return-value]


@mutant("DP02", "decode_page_indices", "dropped guard", "pre-allocates from 0 instead of from D")
def decode_from_zero(
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> WireIndices:
    return kv_to_page_indices(req_to_token[req_pool_idx][:origin_input_len], page_size).astype(np.int32)


@mutant("DP03", "decode_page_indices", "off-by-one slice", "stops one token early")
def decode_short(
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> WireIndices:
    kv = req_to_token[req_pool_idx][decode_prefix_len : origin_input_len - 1]
    return kv_to_page_indices(kv, page_size).astype(np.int32)


@mutant("DP04", "decode_page_indices", "offset in the wrong unit", "the prefix taken in pages, not tokens")
def decode_prefix_pages(
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> WireIndices:
    kv = req_to_token[req_pool_idx][decode_prefix_len // page_size : origin_input_len]
    return kv_to_page_indices(kv, page_size).astype(np.int32)
