"""The paged KV layout: an allocator of physical pages and the request-to-token table.

Contract (SGLang's paged allocator, ``mem_cache/allocator/paged.py``):

* a token's location is ``page * page_size + (logical_position % page_size)``;
* each logical page of a request maps to one physical page; a request's pages need be neither contiguous
  nor ordered;
* page 0 is reserved for padding, so every real page index is >= 1, and an unwritten table slot (0) maps to
  page 0;
* the request-to-token table has ``int32`` rows, as ``ReqToTokenPool`` allocates them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from pdverify.validation import require_int, require_page_size

PADDING_PAGE = 0
"""The physical page the allocator never hands out; unwritten slots point into it."""


class PageAllocator(Protocol):
    """What a property that allocates pages itself needs of an allocator (``PagedAllocator``, or a target's own)."""

    @property
    def free_pages(self) -> int: ...

    def alloc(self, count: int) -> list[int]: ...

    def free(self, pages: Sequence[int]) -> None: ...


@dataclass
class PagedAllocator:
    """Hands out physical pages ``1 .. num_pages - 1`` in the order given by ``free_order``.

    ``free_order`` lets a strategy decide the (fragmented, unordered) order pages come out in; by default
    pages come out ascending.
    """

    num_pages: int
    page_size: int
    free_order: list[int] | None = None
    _free: list[int] = field(init=False, repr=False)
    _live: set[int] = field(init=False, repr=False, default_factory=set)

    def __post_init__(self) -> None:
        require_int("num_pages", self.num_pages, minimum=1)
        require_page_size(self.page_size)
        order = list(range(1, self.num_pages)) if self.free_order is None else list(self.free_order)
        if sorted(order) != list(range(1, self.num_pages)):
            raise ValueError(f"free_order must be a permutation of pages 1..{self.num_pages - 1} (page 0 is reserved)")
        self._free = order

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def alloc(self, count: int) -> list[int]:
        """Take ``count`` pages; ``ValueError`` when fewer are free."""
        require_int("count", count, minimum=0)
        if count > len(self._free):
            raise ValueError(f"count={count} pages requested but only {len(self._free)} are free")
        pages, self._free = self._free[:count], self._free[count:]
        self._live.update(pages)
        return pages

    def free(self, pages: Sequence[int]) -> None:
        """Return pages; freeing a page that is not live (double free, page 0) is a ``ValueError``."""
        for p in pages:
            if p not in self._live:
                raise ValueError(f"page {p} freed but not allocated (double free or never allocated)")
            self._live.discard(p)
            self._free.append(p)


def token_locations(pages: Sequence[int], length: int, page_size: int) -> list[int]:
    """The token locations of logical positions ``0 .. length - 1`` of a request holding ``pages``."""
    require_page_size(page_size)
    require_int("length", length, minimum=0)
    if length > len(pages) * page_size:
        raise ValueError(f"length={length} exceeds the {len(pages)} pages of size {page_size} held")
    if page_size == 1:
        return list(pages[:length])
    offsets = range(page_size)
    out = [base + o for base in [p * page_size for p in pages[: -(-length // page_size)]] for o in offsets]
    del out[length:]
    return out


def pages_needed(length: int, page_size: int) -> int:
    """Pages that hold ``length`` tokens (ceiling division on ints)."""
    return -(-require_int("length", length, minimum=0) // require_page_size(page_size))


@dataclass(frozen=True)
class PagedRow:
    """One request's row of the request-to-token table.

    ``pages`` are the physical pages of logical pages ``0, 1, ...``; ``length`` tokens are written
    (``L``), ``prefix_len`` of them are the decode side's cached prefix ``D`` (page-aligned).
    """

    pages: tuple[int, ...]
    length: int
    page_size: int
    prefix_len: int = 0

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        require_int("length", self.length, minimum=0)
        require_int("prefix_len", self.prefix_len, minimum=0)
        if self.prefix_len > self.length:
            raise ValueError(f"prefix_len={self.prefix_len} must be <= length={self.length}")
        if self.prefix_len % self.page_size:
            raise ValueError(f"prefix_len={self.prefix_len} must be page-aligned (page_size={self.page_size})")
        if any(p == PADDING_PAGE for p in self.pages):
            raise ValueError("pages must not contain page 0 (reserved for padding)")
        if len(set(self.pages)) != len(self.pages):
            raise ValueError("pages must be distinct")
        if len(self.pages) != pages_needed(self.length, self.page_size):
            raise ValueError(
                f"a row of length {self.length} holds {pages_needed(self.length, self.page_size)} pages "
                f"of size {self.page_size}, got {len(self.pages)}"
            )

    @property
    def locations(self) -> list[int]:
        """A fresh list each call (callers may change it); computed once per row."""
        return list(self._locations)

    @functools.cached_property
    def _locations(self) -> tuple[int, ...]:
        return tuple(token_locations(self.pages, self.length, self.page_size))


def build_req_to_token(
    rows: Sequence[Sequence[int]],
    width: int,
    *,
    dtype: torch.dtype = torch.int32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """A request-to-token table with one row per entry of ``rows`` (unwritten slots are 0)."""
    require_int("width", width, minimum=0)
    table = [[0] * width for _ in rows]
    for r, locs in enumerate(rows):
        if len(locs) > width:
            raise ValueError(f"rows[{r}] has {len(locs)} locations but the table width is {width}")
        table[r][: len(locs)] = list(locs)
    return torch.tensor(table, dtype=dtype, device=device).reshape(len(rows), width)
