"""The target protocol: one object that supplies the functions under test.

A target is a frozen record of callables, each optional. A property names the functions it needs; when the
target lacks one the property is *not applicable* (reported as such, never as passed). ``prepare_for_prebuilt``
works on duck-typed batch objects, so it travels with the *layout* its code reads (attribute names of the
SGLang version it was written against); the layout adapter in ``pdverify.targets.layouts`` builds those objects
from pdverify's model and maps the results back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from pdverify.model.batch import Request
from pdverify.model.checksum import ChecksumCase, ChecksumTrace
from pdverify.model.dispatch import DispatchTrace, GenerateCall
from pdverify.model.exchange import DecodeCase, DecodeTrace, PrefillCase, PrefillTrace, WireMessage
from pdverify.model.layout import PageAllocator
from pdverify.model.queue import DecodeQueueCase, QueueTrace
from pdverify.model.sender import BootstrapCase, BootstrapTrace, SenderCase, SenderTrace
from pdverify.model.transfer_queue import TransferQueueCase, TransferTrace
from pdverify.production.page_index import PageIndices
from pdverify.production.transfer import KvChunk, PrefillSendState, WireIndices


class KvToPageIndices(Protocol):
    def __call__(self, kv_indices: torch.Tensor, page_size: int, /) -> PageIndices: ...


class SuffixPageIndices(Protocol):
    def __call__(
        self, req_to_token: torch.Tensor, req_pool_idx: int, prefix_len: int, seq_len: int, page_size: int, /
    ) -> PageIndices: ...


class PageArithmetic(Protocol):
    def __call__(self, n: int, page_size: int, /) -> int: ...


class MinimaxTransferPages(Protocol):
    def __call__(self, token_indices: torch.Tensor, *, page_size: int, prefix_len: int) -> PageIndices: ...


class SendKvChunk(Protocol):
    def __call__(
        self,
        req_to_token: torch.Tensor,
        state: PrefillSendState,
        *,
        extend_end: int,
        last_chunk: bool,
        page_size: int,
    ) -> tuple[KvChunk | None, PrefillSendState]: ...


class TranslateTokenIds(Protocol):
    """Virtual token ids to physical ids through a page table (``translate_token_ids``)."""

    def __call__(
        self,
        *,
        loc: torch.Tensor,
        v2p: torch.Tensor,
        page_size: int,
        dcp_size: int = 1,
        dcp_rank: int = 0,
        out: torch.Tensor | None = None,
        out_width: int | None = None,
    ) -> torch.Tensor: ...


class DecodePageIndices(Protocol):
    def __call__(
        self,
        req_to_token: torch.Tensor,
        req_pool_idx: int,
        decode_prefix_len: int,
        origin_input_len: int,
        page_size: int,
        /,
    ) -> WireIndices: ...


class PrefillExchange(Protocol):
    """The prefill scheduler and its KV sender for one request: bootstrap, early send, every chunk."""

    def __call__(self, case: PrefillCase, device: str, /) -> PrefillTrace: ...


class KvSender(Protocol):
    """The KV sender on its own: ``init`` then the scheduler's sends (``CommonKVSender``)."""

    def __call__(self, case: SenderCase, device: str, /) -> SenderTrace: ...


class Bootstrap(Protocol):
    """Bootstrap finalisation on its own (``PrefillBootstrapQueue.finalize_bootstrap``)."""

    def __call__(self, case: BootstrapCase, device: str, /) -> BootstrapTrace: ...


class DecodePrealloc(Protocol):
    """Decode's pre-allocation of one request: its destination lists and the metadata it sends."""

    def __call__(self, case: DecodeCase, device: str, /) -> DecodeTrace: ...


class DecodeQueue(Protocol):
    """One pass of decode's pre-allocation queue over several requests: admissions, failures, what stays."""

    def __call__(self, case: DecodeQueueCase, device: str, /) -> QueueTrace: ...


class WireRoundtrip(Protocol):
    """Decode's metadata frames, built and parsed back on the prefill side."""

    def __call__(
        self, pages: npt.NDArray[np.integer], aux_index: int, state: list[list[int]], decode_prefix_len: int, /
    ) -> WireMessage: ...


class TransferQueue(Protocol):
    """One pass of decode's transfer queue (``DecodeTransferQueue.pop_transferred``) over the queued transfers."""

    def __call__(self, case: TransferQueueCase, device: str, /) -> TransferTrace: ...


class GenerateDispatch(Protocol):
    """The tokenizer manager's dispatch of one generate call (``TokenizerManager.generate_request``): the requests it
    sends the scheduler."""

    def __call__(self, call: GenerateCall, device: str, /) -> DispatchTrace: ...


class KvChecksum(Protocol):
    """One request's KV handoff with the KV checksum on: prefill's digest, the transfer, decode's verification."""

    def __call__(self, case: ChecksumCase, device: str, /) -> ChecksumTrace: ...


PrebuiltFn = Callable[[Any], None]
"""``prepare_for_prebuilt(batch)`` on a duck-typed batch whose attribute names follow the target's layout."""

SCHEDULER_UNITS: tuple[str, ...] = (
    "prefill_exchange",
    "kv_sender",
    "bootstrap",
    "decode_prealloc",
    "decode_queue",
    "transfer_queue",
    "wire_roundtrip",
    "kv_checksum",
    "generate_dispatch",
)
"""The scheduler-level units, and the tokenizer manager's ``generate_dispatch``: each runs a request through the
server's own PD code (a driver), not one function."""

FUNCTIONS: tuple[str, ...] = (
    "kv_to_page_indices",
    "suffix_page_indices",
    "kv_to_page_num",
    "page_align_floor",
    "minimax_index_transfer_pages",
    "translate_token_ids",
    "send_kv_chunk",
    "decode_page_indices",
    "prepare_for_prebuilt",
    *SCHEDULER_UNITS,
)
"""Every function (unit) a target may supply, in report order."""


class NotApplicable(LookupError):
    """The target does not supply a function a property needs."""


class TargetError(Exception):
    """A target cannot be loaded or is malformed; the message names the target (and the function)."""


class ServerRefuses(Exception):
    """A unit's input is a configuration the target's server would refuse to start with, by the release's own
    validation (the message quotes it): the input is outside the release's domain, never a verdict on it. Properties
    see it as a discarded example (``pdverify.plugin``), counted in the run's events."""


@dataclass(frozen=True, repr=False)
class Target:
    """The functions under test of one implementation.

    ``layout`` names the request/batch layout ``prepare_for_prebuilt`` expects (see
    ``pdverify.targets.layouts.LAYOUTS``); ``sampling_info_path`` is the dotted path of the
    ``SamplingBatchInfo.from_schedule_batch`` its code calls, wrapped during a run to record each call and what it
    returned (it runs as itself; upstream's test patches it out instead).
    """

    name: str
    description: str = ""
    kv_to_page_indices: KvToPageIndices | None = None
    suffix_page_indices: SuffixPageIndices | None = None
    kv_to_page_num: PageArithmetic | None = None
    page_align_floor: PageArithmetic | None = None
    minimax_index_transfer_pages: MinimaxTransferPages | None = None
    translate_token_ids: TranslateTokenIds | None = None
    send_kv_chunk: SendKvChunk | None = None
    decode_page_indices: DecodePageIndices | None = None
    prepare_for_prebuilt: PrebuiltFn | None = None
    prefill_exchange: PrefillExchange | None = None
    kv_sender: KvSender | None = None
    bootstrap: Bootstrap | None = None
    decode_prealloc: DecodePrealloc | None = None
    decode_queue: DecodeQueue | None = None
    transfer_queue: TransferQueue | None = None
    generate_dispatch: GenerateDispatch | None = None
    wire_roundtrip: WireRoundtrip | None = None
    kv_checksum: KvChecksum | None = None
    layout: str = "sglang-0.5.23"
    sampling_info_path: str | None = None
    page_allocator: Callable[[int, int, list[int]], PageAllocator] | None = None
    """Builds the implementation's own paged KV allocator - ``(num_pages, page_size, free_order)``: pages ``1 ..
    num_pages - 1``, handed out in ``free_order`` first - for the properties that allocate pages themselves (M1);
    None: ``pdverify.model.layout.PagedAllocator``."""
    scheduler_scope: Callable[[Any], AbstractContextManager[Any]] | None = None
    """What the implementation's scheduler has in place when it calls ``prepare_for_prebuilt`` on a batch: given
    the batch object, a context in which the server's configuration is published as the implementation reads it
    (and the batch carries the fields its scheduler sets from it); None: nothing to set up."""
    request_factory: Callable[[Request], Any] | None = None
    """Builds the implementation's own request object for a model request (an instance of
    ``pdverify.targets.layouts.guarded_class(its class)``); None: duck requests (``DuckRequest``)."""
    package: str = "pdverify"
    """The distribution whose version the run report records."""
    release: str | None = None
    """The SGLang release this target is (None: not a release; every property's contract applies)."""
    unit_sources: tuple[tuple[str, str], ...] = ()
    """``(unit, where)``: the release's own function behind each unit, or why a unit is not supplied."""

    def __repr__(self) -> str:
        return f"Target({self.name!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis's pretty printer: keep counterexamples short."""
        printer.text(repr(self))

    def supplies(self, function: str) -> bool:
        if function not in FUNCTIONS:
            raise TargetError(f"target {self.name!r}: unknown function {function!r} (known: {', '.join(FUNCTIONS)})")
        return getattr(self, function) is not None

    def require(self, function: str) -> Any:
        """The callable for ``function``; ``NotApplicable`` when the target does not supply it."""
        if not self.supplies(function):
            raise NotApplicable(f"target {self.name!r} does not supply {function}")
        return getattr(self, function)

    def derive(self, name: str, description: str = "", **functions: Any) -> Target:
        """A new target equal to this one but with the named functions (or ``layout``...) replaced.

        >>> from pdverify.targets import load_target
        >>> broken = load_target("pdverify").derive("off-by-one", page_align_floor=lambda n, ps: n)
        """
        known = {f.name for f in dataclasses.fields(self)} - {"name", "description"}
        unknown = sorted(set(functions) - known)
        if unknown:
            raise TargetError(f"target {self.name!r}: cannot replace unknown field(s) {', '.join(unknown)}")
        for fn_name, fn in functions.items():
            if fn_name in FUNCTIONS and fn is not None and not callable(fn):
                raise TargetError(f"target {name!r}: {fn_name} must be callable, got {type(fn).__name__}")
        return dataclasses.replace(self, name=name, description=description or self.description, **functions)
