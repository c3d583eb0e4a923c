"""Oracles of the PD main-KV exchange: what prefill sends chunk by chunk and what decode registers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdverify.oracle.page_index import distinct_pages
from pdverify.validation import require_aligned, require_index_list, require_int, require_page_size


@dataclass(frozen=True)
class ExpectedSend:
    start: int
    end: int
    pages: list[int]
    dst_offset: int
    is_last: bool


def _check_request(row: Sequence[int], prefix_len: int, length: int, page_size: int) -> tuple[list[int], int]:
    values = require_index_list("row", row)
    ps = require_page_size(page_size)
    d = require_aligned("decode_prefix_len", require_int("decode_prefix_len", prefix_len, minimum=0), ps)
    n = require_int("length", length, minimum=0)
    if d > n:
        raise ValueError(f"decode_prefix_len={d} must be <= length={n}")
    if n > len(values):
        raise ValueError(f"length={n} exceeds the row's {len(values)} written slots")
    return values, ps


def decode_pages(row: Sequence[int], decode_prefix_len: int, length: int, page_size: int) -> list[int]:
    """Decode's destination list: the pages of tokens ``[D, L)`` of its row."""
    values, ps = _check_request(row, decode_prefix_len, length, page_size)
    return distinct_pages(values[decode_prefix_len:length], ps)


def prefill_sends(
    row: Sequence[int],
    decode_prefix_len: int,
    length: int,
    page_size: int,
    chunk_ends: Sequence[int],
) -> list[ExpectedSend]:
    """The sends prefill makes when its chunks end at ``chunk_ends`` (the last one is the last chunk).

    Contract: every chunk but the last ends before ``length``; the last ends at ``length``.
    Rules: a send covers ``[sent-so-far, end)``; a non-last chunk only sends whole pages (``end`` rounded
    down to a page boundary), never moves backwards, and is not sent when it holds no page; the last chunk
    sends up to ``length`` and is sent even when empty. Each send lands right after the previous one in the
    destination list, and the send that completes all ``ceil((L - D) / ps)`` pages is flagged last.
    """
    values, ps = _check_request(row, decode_prefix_len, length, page_size)
    ends = require_index_list("chunk_ends", chunk_ends)
    if not ends:
        raise ValueError("chunk_ends must hold at least the last chunk's end")
    if ends[-1] != length:
        raise ValueError(f"chunk_ends[-1]={ends[-1]}: the last chunk must end at length={length}")
    for k, end in enumerate(ends[:-1]):
        if not 0 <= end < length:
            raise ValueError(f"chunk_ends[{k}]={end}: a non-last chunk ends in [0, length={length})")
    total = len(distinct_pages(values[decode_prefix_len:length], ps))
    sent_to = decode_prefix_len
    placed = 0
    out: list[ExpectedSend] = []
    for k, chunk_end in enumerate(ends):
        last = k == len(ends) - 1
        stop = chunk_end if chunk_end < length else length
        if not last:
            stop = (stop // ps) * ps
        if stop < sent_to:
            continue
        pages = distinct_pages(values[sent_to:stop], ps)
        begin, sent_to = sent_to, stop
        if not pages and not last:
            continue
        out.append(ExpectedSend(begin, stop, pages, placed, placed + len(pages) == total))
        placed += len(pages)
    return out
