"""Layout adapters: build the duck-typed batch a target's ``prepare_for_prebuilt`` reads, run it, map back.

Three layouts are known (docs/concepts.md, "Layouts"):

* ``sglang-0.5.23``: ``req.kv.req_pool_idx``, ``req.prefix_len``, ``req.extend_len`` (``extend_end - prefix_len``);
* ``sglang-pr35070`` (the seed's era): ``req.req_pool_idx``, ``req.prefix_indices`` (the prefix's token
  locations), ``req.extend_range`` (``start``, ``end``, ``length``);
* ``sglang-any``: both, plus the pre-#27611 ``extend_input_len`` and the request-level logprob settings
  (released SGLang from 0.4.6.post5 to 0.5.21).

Every request also carries the prompt behind a guard: its length reads freely, but reading its elements,
``get_fill_ids()``, ``fill_ids`` or ``full_untruncated_fill_ids`` is recorded in ``prompt_reads``; with
``strict_prompt`` such a read raises ``PromptReadError``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import pkgutil
import sys
import traceback
from array import array
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import torch

from pdverify.ledger import TransferLedger
from pdverify.model.batch import PrebuiltBatch, PrebuiltOutcome, Request, RequestAfter
from pdverify.targets.protocol import ServerRefuses, Target, TargetError

BATCH_FIELDS: tuple[str, ...] = (
    "forward_mode",
    "input_ids",
    "out_cache_loc",
    "seq_lens",
    "seq_lens_cpu",
    "orig_seq_lens",
    "req_pool_indices",
    "req_pool_indices_cpu",
    "seq_lens_sum",
    "extend_num_tokens",
    "prefix_lens",
    "extend_lens",
    "top_logprobs_nums",
    "token_ids_logprobs",
    "extend_logprob_start_lens",
    "extend_input_logprob_token_ids",
    "multimodal_inputs",
    "sampling_info",
)
"""The batch attributes ``prepare_for_prebuilt`` writes (``top_logprobs_nums`` / ``token_ids_logprobs`` only
with ``return_logprob``)."""

_UNSET = object()


class PromptReadError(AssertionError):
    """Raised by a strict prompt guard: the code under test read the prompt's contents."""


class SamplingInfoRaised(AssertionError):
    """The target's own ``SamplingBatchInfo.from_schedule_batch``, called by ``prepare_for_prebuilt`` on a batch its
    server took, raised: the decode scheduler's step dies there (SGLang's scheduler loop does not catch it). The
    message names the exception and where it was raised: ``file:line`` of the innermost frame of the target's own
    code, outside pdverify and torch (a ``torch`` call the transfer ledger passes on raises in the ledger's and
    torch's dispatch frames, but the call is the target's)."""

    @classmethod
    def of(cls, exc: BaseException) -> SamplingInfoRaised:
        frames = traceback.extract_tb(exc.__traceback__)
        own, lib = str(Path(__file__).resolve().parent.parent), str(Path(torch.__file__).resolve().parent)

        def outside(f: traceback.FrameSummary, *roots: str) -> bool:
            return not str(Path(f.filename).resolve()).startswith(roots)

        theirs = [f for f in frames if outside(f, own, lib)] or [f for f in frames if outside(f, own)] or frames
        where = f"{Path(theirs[-1].filename).name}:{theirs[-1].lineno}" if theirs else "?"
        return cls(f"building the sampling info raised {type(exc).__name__} at {where}: {exc}")


class GuardedTokens:
    """A token list whose length is free to read but whose contents are guarded."""

    def __init__(self, tokens: list[int], label: str, reads: list[str], strict: bool) -> None:
        self._tokens, self._label, self._reads, self._strict = tokens, label, reads, strict

    def _touch(self, how: str) -> None:
        self._reads.append(f"{self._label}{how}")
        if self._strict:
            raise PromptReadError(f"the prompt must not be read: {self._label}{how}")

    def __len__(self) -> int:
        return len(self._tokens)

    def __getitem__(self, index: Any) -> Any:
        self._touch(f"[{index!r}]")
        return self._tokens[index]

    def __iter__(self) -> Iterator[int]:
        self._touch(" iterated")
        return iter(self._tokens)

    def __repr__(self) -> str:
        return f"GuardedTokens(len={len(self._tokens)})"


class FillIds(list[int]):
    """Fill ids for a release of unknown era: releases before 0.5.7 keep them in a ``list`` and concatenate with
    ``sum(ids, [])``, later ones in an ``array('q')`` with ``sum(ids, array('q'))``; this list (and its slices)
    concatenates with either and gives back the type it was added to."""

    def __getitem__(self, index: Any) -> Any:
        got = super().__getitem__(index)
        return FillIds(got) if isinstance(index, slice) else got

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, array):
            return array(other.typecode, [*other, *self])
        if isinstance(other, list):
            return [*other, *self]
        return NotImplemented


class PromptGuard:
    """The prompt instrument of a request object: ``fill_ids``, ``full_untruncated_fill_ids`` and ``get_fill_ids()``
    record every access (and refuse it when strict). Mixed into a duck request, or into a release's own request
    class (``guarded_class``), whose constructor may assign those names: an assignment is kept aside, never read
    back (the model's fill is what a read returns)."""

    _pdverify_reads: list[str] | None = None  # None until armed
    _pdverify_strict: bool
    _pdverify_fill: list[int]
    _pdverify_any_era: bool

    def arm(self, reads: list[str], strict: bool, fill: list[int], any_era: bool) -> None:
        """Start recording into ``reads``; ``fill`` is what a read of the fill ids returns."""
        self._pdverify_reads, self._pdverify_strict = reads, strict
        self._pdverify_fill, self._pdverify_any_era = fill, any_era

    def _fill_ids(self, how: str) -> Any:
        reads = self._pdverify_reads
        if reads is None:  # the release's own constructor, before the guard is armed
            return self.__dict__.get(f"_pdverify_assigned_{how}")
        reads.append(how)
        if self._pdverify_strict:
            raise PromptReadError(f"the prompt must not be read: {how}")
        return FillIds(self._pdverify_fill) if self._pdverify_any_era else array("q", self._pdverify_fill)

    def get_fill_ids(self) -> Any:
        return self._fill_ids("get_fill_ids()")

    @property
    def fill_ids(self) -> Any:
        return self._fill_ids("fill_ids")

    @fill_ids.setter
    def fill_ids(self, value: Any) -> None:
        self.__dict__["_pdverify_assigned_fill_ids"] = value

    @property
    def full_untruncated_fill_ids(self) -> Any:
        return self._fill_ids("full_untruncated_fill_ids")

    @full_untruncated_fill_ids.setter
    def full_untruncated_fill_ids(self, value: Any) -> None:
        self.__dict__["_pdverify_assigned_full_untruncated_fill_ids"] = value


class DuckRequest(PromptGuard):
    """A request object in a target's layout, for targets that bring no request class of their own."""


_Request = TypeVar("_Request")


@functools.cache
def guarded_class(cls: type[_Request]) -> type[_Request]:
    """``cls`` (a release's own request class) with the prompt instrument (``PromptGuard``) over it: instances are
    built by ``cls``'s own constructor and behave as ``cls``'s in everything but the guarded reads."""
    return cast("type[_Request]", type(f"Guarded{cls.__name__}", (PromptGuard, cls), {"__module__": __name__}))


def _put(obj: Any, name: str, value: Any) -> None:
    """Place a field on a request object. A read-only property of a real request class computes the field itself:
    it must agree with the layout's value (else the layout and the release disagree - a ``TargetError``, never a
    silent override)."""
    static = inspect.getattr_static(type(obj), name, None)
    if isinstance(static, property) and static.fset is None:
        got = getattr(obj, name)
        if got != value:
            raise TargetError(f"{type(obj).__name__}.{name} computes {got!r} where the layout places {value!r}")
        return
    setattr(obj, name, value)


CLIENT_PROCESSOR = '{"callable": "a client\'s serialized CustomLogitProcessor"}'
"""A duck request's custom logit processor (what the API takes: a serialized ``CustomLogitProcessor``); a target's
own request class carries one its release serialized."""


def _own(obj: Any, name: str) -> Any | None:
    """The sub-object ``name`` (``kv``, ``logprob``) a real request class built itself, or None for a duck."""
    return None if isinstance(obj, DuckRequest) else getattr(obj, name, None)


@dataclass(frozen=True)
class Range:
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def _kv_info_class(obj: Any) -> type | None:
    """The ``ReqKvInfo`` class of the module that defines ``obj``'s request class (0.5.16 on), None before."""
    for klass in type(obj).__mro__:
        found = getattr(sys.modules.get(klass.__module__), "ReqKvInfo", None)
        if isinstance(found, type):
            return found
    return None


def _place_kv(duck: Any, req: Request, *, any_era: bool) -> None:
    """The request's KV bookkeeping as a decode scheduler leaves it when it builds the PREBUILT batch.

    * a duck request: ``kv.req_pool_idx`` (a namespace: the duck brings no class of its own);
    * a release's ``Req`` whose ``ReqKvInfo`` holds the row (0.5.19 on, built by the constructor): the row in it;
    * a release's ``Req`` whose ``req.kv`` is None until allocation (0.5.16-0.5.18): the release's own
      ``ReqKvInfo(kv_allocated_len=..., swa_evicted_seqlen=0)`` that pre-allocation builds (``decode.py``
      ``alloc_for_decode_prealloc``), its allocated length the extend end - the row stays on the request;
    * a release's ``Req`` with no ``kv`` at all (to 0.5.15): nothing - the row is on the request itself.

    Only ``sglang-any`` may meet the last two; the 0.5.23 layout there is a ``TargetError`` (the release keeps the
    row elsewhere)."""
    if isinstance(duck, DuckRequest):
        duck.kv = SimpleNamespace(req_pool_idx=req.req_pool_idx)  # type: ignore[attr-defined]
        return
    kv = getattr(duck, "kv", None)
    if kv is not None and hasattr(kv, "req_pool_idx"):
        kv.req_pool_idx = req.req_pool_idx
        return
    if not any_era:
        raise TargetError(
            f"layout 'sglang-0.5.23' places the row in req.kv.req_pool_idx; {type(duck).__name__}.kv is {kv!r} "
            "(this release keeps the row on the request: use layout 'sglang-any')"
        )
    info = _kv_info_class(duck) if hasattr(duck, "kv") else None
    if kv is None and info is not None:
        duck.kv = info(kv_allocated_len=req.extend_end, swa_evicted_seqlen=0)


def _place_0_5_23(duck: Any, req: Request, row: torch.Tensor, *, any_era: bool = False) -> None:
    _place_kv(duck, req, any_era=any_era)
    _put(duck, "prefix_len", req.prefix_len)
    _put(duck, "extend_end", req.extend_end)
    _put(duck, "extend_len", req.extend_len)


def _place_pr35070(duck: Any, req: Request, row: torch.Tensor) -> None:
    _put(duck, "req_pool_idx", req.req_pool_idx)
    _put(duck, "prefix_indices", row[: req.prefix_len].to(torch.int64))
    _put(duck, "extend_range", Range(req.prefix_len, req.extend_end))


def _place_any(duck: Any, req: Request, row: torch.Tensor) -> None:
    """Every era's names at once, consistent with one another (docs/concepts.md, "Layouts"): what any release from
    0.4.6.post5 to 0.5.23 reads is there. Pre-#27611 releases read ``extend_input_len``; pre-#25712 ones read
    the logprob settings on the request itself."""
    _place_0_5_23(duck, req, row, any_era=True)
    _place_pr35070(duck, req, row)
    _put(duck, "extend_input_len", req.extend_len)
    _put(duck, "top_logprobs_num", req.logprob.top_logprobs_num)
    _put(duck, "token_ids_logprob", req.logprob.token_ids_logprob)


LAYOUTS: dict[str, Callable[[Any, Request, torch.Tensor], None]] = {
    "sglang-0.5.23": _place_0_5_23,
    "sglang-pr35070": _place_pr35070,
    "sglang-any": _place_any,
}
"""Layout name -> how a request's position fields are spelled in it."""


def build_request(
    req: Request,
    layout: str,
    row: torch.Tensor,
    reads: list[str],
    strict: bool,
    factory: Callable[[Request], Any] | None = None,
) -> Any:
    """The request object ``prepare_for_prebuilt`` reads: ``factory(req)`` (a target's own request class, built
    through ``guarded_class``) or a ``DuckRequest``, with ``req``'s fields placed in ``layout`` and the prompt
    guarded: ``origin_input_ids``, ``output_ids`` and every attribute the constructor aliased to the prompt array."""
    if layout not in LAYOUTS:
        raise TargetError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    fill = [*req.origin_input_ids, *req.output_ids][: req.extend_end]
    duck = DuckRequest() if factory is None else factory(req)
    if not isinstance(duck, PromptGuard):
        raise TargetError(f"request factory built a {type(duck).__name__}, not a guarded_class(...) instance")
    duck.arm(reads, strict, fill, any_era=layout == "sglang-any")
    LAYOUTS[layout](duck, req, row)
    prompt = getattr(duck, "origin_input_ids", None)
    for name, value in list(vars(duck).items()):
        if prompt is not None and value is prompt and name != "origin_input_ids":
            setattr(duck, name, GuardedTokens(list(req.origin_input_ids), name, reads, strict))
    duck.origin_input_ids = GuardedTokens(list(req.origin_input_ids), "origin_input_ids", reads, strict)  # type: ignore[attr-defined]
    duck.output_ids = GuardedTokens(list(req.output_ids), "output_ids", reads, strict)  # type: ignore[attr-defined]
    for name in (
        "retracted_stain",
        "already_computed",
        "cached_tokens",
        "cached_tokens_device",
        "is_retracted",
        "multimodal_inputs",
    ):
        setattr(duck, name, getattr(req, name))
    if req.pd_rebootstrap_in_progress is not None:
        duck.pd_rebootstrap_in_progress = req.pd_rebootstrap_in_progress  # type: ignore[attr-defined]
    if _own(duck, "sampling_params") is None:  # a real request class built its own from the settings
        duck.sampling_params = SimpleNamespace(**vars(req.sampling))  # type: ignore[attr-defined]
        duck.custom_logit_processor = CLIENT_PROCESSOR if req.sampling.custom_logit_processor else None  # type: ignore[attr-defined]
    logprob = _own(duck, "logprob")
    if logprob is None:
        duck.logprob = SimpleNamespace(  # type: ignore[attr-defined]
            top_logprobs_num=req.logprob.top_logprobs_num, token_ids_logprob=req.logprob.token_ids_logprob
        )
    else:  # the release's own ReqLogprob
        logprob.top_logprobs_num = req.logprob.top_logprobs_num
        logprob.token_ids_logprob = req.logprob.token_ids_logprob
    for name, value in req.extra.items():
        setattr(duck, name, value)
    return duck


class DuckBatch(SimpleNamespace):
    """The batch object ``prepare_for_prebuilt`` reads (its fields as keywords). Weak-referenceable, as a
    ``ScheduleBatch`` is: SGLang's penalizer orchestrator, built inside ``SamplingBatchInfo.from_schedule_batch``,
    keeps a weak reference to its batch."""


def build_batch_object(
    target: Target,
    batch: PrebuiltBatch,
    device: str,
    *,
    strict_prompt: bool = False,
    table: torch.Tensor | None = None,
) -> tuple[Any, list[str]]:
    """The duck-typed batch ``target.prepare_for_prebuilt`` reads, and the list its prompt reads go to.

    ``table`` (an int32 request-to-token tensor on ``device``) replaces ``batch.req_to_token`` when given, so
    large benchmark tables need not pass through Python lists.
    """
    reads: list[str] = []
    if table is None:
        rows = batch.req_to_token
        table = torch.tensor(rows, dtype=torch.int32, device=device).reshape(len(rows), batch.width)
    reqs = [
        build_request(r, target.layout, table[r.req_pool_idx], reads, strict_prompt, target.request_factory)
        for r in batch.reqs
    ]
    duck = DuckBatch(
        reqs=reqs,
        device=device,
        req_to_token_pool=SimpleNamespace(req_to_token=table),
        return_logprob=batch.return_logprob,
        model_config=SimpleNamespace(vocab_size=batch.vocab_size),
        # the server configuration the target's scheduler scope publishes (not a field of SGLang's batch)
        pdverify_server=SimpleNamespace(
            flags=tuple(sorted(batch.server_flags().items())),
            eos_token_id=batch.eos_token_id,
            model_eos_token_ids=batch.model_eos_token_ids,
            additional_stop_token_ids=batch.additional_stop_token_ids,
        ),
        **{name: _UNSET for name in BATCH_FIELDS},
    )
    return duck, reads


@functools.cache
def _owner(path: str) -> tuple[Any, str]:
    owner, _, attr = path.rpartition(".")
    try:
        return pkgutil.resolve_name(owner), attr
    except (ImportError, AttributeError, ValueError) as exc:
        raise TargetError(f"cannot patch {path!r}: {exc}") from None


@contextmanager
def wrapped(path: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``path`` (``module.Class.attr`` or ``module.attr``) replaced by ``wrapper(original)`` for the block -
    ``original`` bound as ``path`` resolved before (a classmethod bound to its class) - and restored after it, also
    on error. What ``mock.patch(wraps=...)`` does, without building a mock per call (the adapter runs once per
    example)."""
    owner, attr = _owner(path)
    original = getattr(owner, attr)
    saved = owner.__dict__[attr] if isinstance(owner, type) and attr in owner.__dict__ else original
    replacement = wrapper(original)
    setattr(owner, attr, staticmethod(replacement) if isinstance(owner, type) else replacement)
    try:
        yield
    finally:
        setattr(owner, attr, saved)


def run_prepare_for_prebuilt(
    target: Target, batch: PrebuiltBatch, device: str, *, strict_prompt: bool = False, measure: bool = False
) -> PrebuiltOutcome:
    """Run ``target.prepare_for_prebuilt`` on ``batch`` placed on ``device`` and read everything back.

    The run is under ``target.scheduler_scope(batch)`` where the target has one (the server configuration its
    scheduler would have published). The target's ``SamplingBatchInfo.from_schedule_batch`` (``sampling_info_path``)
    runs as itself, each call recorded with what it returned. With ``measure``, a ``TransferLedger`` watches the
    target call alone (not the adapter's own setup) and is returned as ``outcome.ledger``; the sampling info's own
    copies are set aside in it (``ledger.asides["sampling_info"]``).
    """
    fn = target.require("prepare_for_prebuilt")
    duck, reads = build_batch_object(target, batch, device, strict_prompt=strict_prompt)
    reqs = duck.reqs
    table = duck.req_to_token_pool.req_to_token
    before = table.clone()
    calls: list[tuple[Any, Any]] = []
    returned: list[Any] = []
    ledger = TransferLedger(device) if measure else None

    def through(original: Callable[..., Any]) -> Callable[..., Any]:
        """The target's own ``from_schedule_batch``, called through and recorded; its copies belong to its own
        budget and are set aside in the ledger (``sampling_info``)."""

        def record(b: Any, vocab_size: Any) -> Any:
            calls.append((b, vocab_size))
            with ledger.aside("sampling_info") if ledger is not None else contextlib.nullcontext():
                try:
                    returned.append(original(b, vocab_size))
                except (AssertionError, TargetError, ServerRefuses):
                    raise  # a prompt read the guard refused, the adapter's own error, a refused input
                except Exception as exc:
                    raise SamplingInfoRaised.of(exc) from exc
            return returned[-1]

        return record

    with ExitStack() as stack:
        if target.scheduler_scope is not None:
            stack.enter_context(target.scheduler_scope(duck))
        if target.sampling_info_path is not None:
            stack.enter_context(wrapped(target.sampling_info_path, through))
        if ledger is not None:
            stack.enter_context(ledger)
        fn(duck)
    fields = {name: getattr(duck, name) for name in BATCH_FIELDS if getattr(duck, name) is not _UNSET}
    after = [
        RequestAfter(
            d.cached_tokens,
            d.cached_tokens_device,
            d.already_computed,
            d.is_retracted,
            getattr(d, "pd_rebootstrap_in_progress", False),
            {name: getattr(d, name) for name in r.extra},
        )
        for d, r in zip(reqs, batch.reqs, strict=True)
    ]
    return PrebuiltOutcome(
        fields=fields,
        untouched={name for name in BATCH_FIELDS if name not in fields},
        reqs_after=after,
        sampling_info_calls=calls,
        sampling_info_returned=returned[-1] if returned else _UNSET,
        prompt_reads=reads,
        req_to_token_before=before,
        req_to_token_after=table,
        batch_object=duck,
        ledger=ledger,
        request_objects=list(reqs),
    )
