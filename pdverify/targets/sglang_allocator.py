"""SGLang's own paged KV allocator for the properties that allocate pages themselves (M1's two pools).

``SGLangPages(num_pages, page_size, free_order)`` is the installed release's allocator configured as a PD server
configures it - ``PagedTokenToKVPoolAllocator`` with ``need_sort`` (at page size 1 the token-level
``TokenToKVPoolAllocator``, which a server builds there, ``kv_cache_configurator.py:2915``) - its free list set to
``free_order`` (state injection, as the decode drivers do), seen through the page-level interface M1 uses
(``pdverify.model.layout.PagedAllocator``'s): ``alloc(count)`` hands out whole pages by SGLang's own ``alloc``, and
``free(pages)`` returns their token slots through SGLang's own ``free`` - freed pages wait in its release list and
are sorted into the free list when an allocation runs short, as on a PD server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class SGLangPages:  # pragma: no cover - conformance venv
    """The release's own KV allocator over pages ``1 .. num_pages - 1`` (page 0 reserved), page by page."""

    def __init__(self, num_pages: int, page_size: int, free_order: Sequence[int]) -> None:
        from pdverify.targets.sglang_decode import _allocator, _token_allocator

        order = tuple(free_order)
        if sorted(order) != list(range(1, num_pages)):
            raise ValueError(f"free_order must be a permutation of pages 1..{num_pages - 1} (page 0 is reserved)")
        self.page_size = page_size
        # page size 1: the token-level allocator, the one a server builds there
        self.own: Any = (_allocator if page_size > 1 else _token_allocator)(order, page_size, None)

    @property
    def free_pages(self) -> int:
        return int(self.own.available_size()) // self.page_size

    def alloc(self, count: int) -> list[int]:
        """``count`` whole pages from SGLang's own ``alloc`` (``ValueError`` when it has too few)."""
        if count == 0:
            return []
        slots = self.own.alloc(count * self.page_size)
        if slots is None:
            raise ValueError(f"count={count} pages requested but only {self.free_pages} are free")
        return [int(s) // self.page_size for s in slots[:: self.page_size].tolist()]

    def free(self, pages: Sequence[int]) -> None:
        """The pages' token slots back through SGLang's own ``free``."""
        ps = self.page_size
        slots = [p * ps + o for p in pages for o in range(ps)]
        if slots:
            self.own.free(torch.tensor(slots, dtype=torch.int64))


def sglang_pages(num_pages: int, page_size: int, free_order: Sequence[int]) -> SGLangPages:  # pragma: no cover
    """``Target.page_allocator`` of the ``sglang`` target."""
    return SGLangPages(num_pages, page_size, free_order)
