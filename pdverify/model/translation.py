"""Virtual-to-physical token-id translation (``translate_token_ids``, the lookup behind the unified pools'
``translate_kv_loc``): what one call is given.

A ``TranslateCase`` holds the virtual token ids (``loc``: 1-D, or 2-D rows of a page table; ``-1`` is padding),
their dtype, the page table ``v2p`` (entry ``v``: the physical page of virtual page ``v``), the page size, the
decode context-parallel width and rank (ids of other ranks are not this rank's), and how the result is returned:
a fresh int64 tensor, written into a caller's ``out`` of the same shape, or into the first ``out_width`` lanes of
a packed 1-D ``out`` (a captured graph's tier, longer than the batch; lanes past the batch are cleared).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdverify.validation import require_int, require_page_size

OUT_MODES = ("fresh", "out", "out_width")


@dataclass(frozen=True)
class TranslateCase:
    page_size: int
    loc: tuple[tuple[int, ...], ...]
    """Rows of virtual token ids; one row is a 1-D ``loc`` unless ``two_d``."""
    v2p: tuple[int, ...]
    dtype: str = "int64"
    two_d: bool = False
    dcp_size: int = 1
    dcp_rank: int = 0
    out_mode: str = "fresh"
    out_width: int = 0
    """With ``out_mode == "out_width"``: the lanes written (at least the ids' count)."""
    out_spare: int = 0
    """With ``out_mode == "out_width"``: lanes of ``out`` past ``out_width`` (left untouched)."""

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        if self.dtype not in ("int32", "int64"):
            raise ValueError(f"dtype={self.dtype!r} must be 'int32' or 'int64'")
        if not self.loc or len({len(r) for r in self.loc}) != 1:
            raise ValueError("loc must hold at least one row, all rows of one length")
        if not self.two_d and len(self.loc) != 1:
            raise ValueError(f"a 1-D loc is one row, got {len(self.loc)}")
        if not self.v2p:
            raise ValueError("v2p must hold at least the sink entry 0")
        require_int("dcp_size", self.dcp_size, minimum=1)
        if not 0 <= self.dcp_rank < self.dcp_size:
            raise ValueError(f"dcp_rank={self.dcp_rank} must be in [0, dcp_size={self.dcp_size})")
        if self.out_mode not in OUT_MODES:
            raise ValueError(f"out_mode={self.out_mode!r} must be one of {OUT_MODES}")
        if self.out_mode == "out_width":
            if self.two_d:
                raise ValueError("out_width writes a packed 1-D lane range: loc must be 1-D")
            if self.out_width < self.count:
                raise ValueError(f"out_width={self.out_width} must be at least the {self.count} ids")
            require_int("out_spare", self.out_spare, minimum=0)

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.loc)

    @property
    def flat(self) -> list[int]:
        return [v for r in self.loc for v in r]
