"""Second defects planted in SGLang's own code, behind its recorded findings (target ``sglang-plant:ID``).

A recorded finding must not blind its property (``pdverify.findings``). These plants show it does not: each changes
one SGLang function on the path a finding's property checks - the release's code otherwise runs as released, the
finding included - and the conformance gate must report the property's failure as *new* while the unplanted
release stays green (``ci/planted_defects.sh``, run by ``ci/conformance.sh``).

Each plant wraps the release's own function (patched for the duration of one unit call), so it is as faithful to
the release as the release itself, but for the planted fault.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

from pdverify.targets.protocol import Target, TargetError


@dataclass(frozen=True)
class Plant:
    id: str
    behind: str
    """The recorded finding it hides behind (same property, same release)."""
    property: str
    unit: str
    description: str
    patch: Callable[[], contextlib.AbstractContextManager[Any]]


def _decode_main_list_short() -> contextlib.AbstractContextManager[Any]:
    from sglang.srt.disaggregation import decode

    real = decode.DecodePreallocQueue._transfer_page_indices

    def short(self: Any, decode_req: Any, kv_indices: Any, page_size: int) -> Any:
        pages = real(self, decode_req, kv_indices, page_size)
        return pages[:-1] if len(pages) > 1 else pages

    return mock.patch.object(decode.DecodePreallocQueue, "_transfer_page_indices", short)


def _decode_swa_window_a_page_early() -> contextlib.AbstractContextManager[Any]:
    from sglang.srt.disaggregation import decode

    real = decode.page_align_floor

    def early(value: int, page_size: int) -> int:
        floor: int = real(value, page_size)
        return floor - page_size if floor >= page_size else floor

    return mock.patch.object(decode, "page_align_floor", early)


def _checksum_skips_first_page() -> contextlib.AbstractContextManager[Any]:
    from sglang.srt.disaggregation import checksum

    real = checksum._to_page_indices_gpu

    def skip(idx: Any, page_size: int) -> Any:
        pages = real(idx, page_size)
        return pages[1:] if len(pages) > 1 else pages

    return mock.patch.object(checksum, "_to_page_indices_gpu", skip)


def _checksum_from_zero() -> contextlib.AbstractContextManager[Any]:
    from sglang.srt.disaggregation import prefill

    real = prefill.page_indices_for_request

    def from_zero(scheduler: Any, req: Any, end_idx: int, start_idx: int = 0) -> Any:
        return real(scheduler, req, end_idx, start_idx=0)

    return mock.patch.object(prefill, "page_indices_for_request", from_zero)


PLANTS: dict[str, Plant] = {
    p.id: p
    for p in (
        Plant("XF1A", "F1", "D1", "decode_prealloc", "decode's main KV list drops its last page "
              "(_transfer_page_indices)", _decode_main_list_short),
        Plant("XF1B", "F1", "D1", "decode_prealloc", "decode's SWA window starts a page early (page_align_floor)",
              _decode_swa_window_a_page_early),
        Plant("XF2A", "F2", "S16", "prefill_exchange", "the KV checksum skips the first page (_to_page_indices_gpu)",
              _checksum_skips_first_page),
        Plant("XF2B", "F2", "S16", "prefill_exchange", "the KV checksum digests from 0, the decode prefix included "
              "(page_indices_for_request)", _checksum_from_zero),
    )
}  # fmt: skip


def planted_target(ident: str) -> Target:  # pragma: no cover - runs in the SGLang conformance venv
    """The installed SGLang release with plant ``ident`` in its code for every call of the plant's unit."""
    plant = PLANTS.get(ident)
    if plant is None:
        raise TargetError(f"unknown target 'sglang-plant:{ident}': plants are {', '.join(PLANTS)}")
    from pdverify.targets.builtin import sglang_target

    base = sglang_target()
    real = base.require(plant.unit)

    def planted(*args: Any, **kwargs: Any) -> Any:
        with plant.patch():
            return real(*args, **kwargs)

    return base.derive(f"sglang-plant:{plant.id}", f"{base.description} + {plant.description}", **{plant.unit: planted})
