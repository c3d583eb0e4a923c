"""The request-field registry: add a request field in one place and every strategy that builds requests draws it.

A field states its strategy (what values to generate), its default (what a request built without it holds: the
explicit examples, a hand-built batch) and its expected effect (the value ``prepare_for_prebuilt`` must leave it
at; by default: unchanged). The batch and request strategies draw it into ``Request.extra``, the scheduler-level
strategies into ``PrefillCase.extra``, ``DecodeCase.extra`` and ``QueuedRequest.extra``; the layout adapters and
the SGLang drivers set it as an attribute on the request object the target reads, and property P30 checks its
expected effect on every target. Every draw is counted (``DRAWN``): ``pdverify check`` reports how often each
registered field was drawn and fails the run when one never was.

Where to register (``docs/guide.md``, "Adding a field"): in a module of your own, named on the command line
(``pdverify check --fields mypkg.pd_fields``) or published as a ``pdverify.fields`` entry point; either is
imported in every process of the run (pytest-xdist workers included) before anything is drawn.

>>> from hypothesis import strategies as st
>>> register_field(RequestField("my_priority", st.integers(0, 3), default=0))  # doctest: +ELLIPSIS
RequestField(name='my_priority', ...)
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

if TYPE_CHECKING:
    from pdverify.model.batch import PrebuiltBatch
    from pdverify.strategies._choices import Choices


def unchanged(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class RequestField:
    name: str
    strategy: st.SearchStrategy[Any]
    default: Any = None
    expected_after: Callable[[Any], Any] = field(default=unchanged)
    description: str = ""


REGISTRY: dict[str, RequestField] = {}
DRAWN: Counter[str] = Counter()
"""How many times each registered field was drawn in this process (``draw_fields``)."""
ENTRY_POINT_GROUP = "pdverify.fields"

_RESERVED = {
    "req_pool_idx", "prefix_len", "extend_len", "origin_input_ids", "output_ids", "retracted_stain",
    "already_computed", "cached_tokens", "cached_tokens_device", "is_retracted", "pd_rebootstrap_in_progress",
    "logprob", "multimodal_inputs", "kv", "extend_end", "extend_range", "prefix_indices", "get_fill_ids",
    "fill_ids", "full_untruncated_fill_ids",
}  # fmt: skip


def register_field(spec: RequestField) -> RequestField:
    """Add ``spec`` to the registry; ``InvalidArgument`` for a bad or clashing name or a non-strategy."""
    if not spec.name.isidentifier():
        raise InvalidArgument(f"field name {spec.name!r} is not a Python identifier")
    if spec.name in _RESERVED:
        raise InvalidArgument(f"field name {spec.name!r} is a built-in request field")
    if spec.name in REGISTRY:
        raise InvalidArgument(f"field {spec.name!r} is already registered")
    if not isinstance(spec.strategy, st.SearchStrategy):
        raise InvalidArgument(f"field {spec.name!r}: strategy must be a SearchStrategy, got {spec.strategy!r}")
    if not callable(spec.expected_after):
        raise InvalidArgument(f"field {spec.name!r}: expected_after must be callable")
    REGISTRY[spec.name] = spec
    return spec


def unregister_field(name: str) -> None:
    if name not in REGISTRY:
        raise InvalidArgument(f"field {name!r} is not registered")
    del REGISTRY[name]


@contextmanager
def registered(spec: RequestField) -> Iterator[RequestField]:
    """Register ``spec`` for the duration of a ``with`` block."""
    register_field(spec)
    try:
        yield spec
    finally:
        unregister_field(spec.name)


def expected_effects() -> dict[str, Callable[[Any], Any]]:
    return {name: spec.expected_after for name, spec in REGISTRY.items()}


def draw_fields(c: Choices) -> dict[str, Any]:
    """One value of every registered field (nothing drawn when none is registered), each draw counted."""
    values = {name: c.draw(spec.strategy) for name, spec in REGISTRY.items()}
    DRAWN.update(values.keys())
    return values


def with_defaults(batch: PrebuiltBatch) -> PrebuiltBatch:
    """``batch`` with every registered field a request lacks set to the field's default (a request built by hand or
    pinned as an explicit example before the field existed holds the default, as SGLang's constructor gives it)."""
    if not REGISTRY or all(set(REGISTRY) <= set(r.extra) for r in batch.reqs):
        return batch
    reqs = [replace(r, extra={**{n: s.default for n, s in REGISTRY.items()}, **r.extra}) for r in batch.reqs]
    return replace(batch, reqs=reqs)


def load_field_modules(modules: list[str]) -> list[str]:
    """Import each module of ``modules`` (they register their fields at import) and every ``pdverify.fields`` entry
    point (a ``RequestField``, a list of them, or a function that registers them); the names registered since.
    ``InvalidArgument`` naming the module or entry point that fails."""
    from importlib.metadata import entry_points

    before = set(REGISTRY)
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise InvalidArgument(f"--fields: cannot import field module {name!r}: {exc}") from None
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise InvalidArgument(f"entry point {ep.name!r} ({ep.value}) of {ENTRY_POINT_GROUP}: {exc}") from None
        specs = obj if isinstance(obj, list | tuple) else [obj]
        for spec in specs:
            if isinstance(spec, RequestField):
                if spec.name not in REGISTRY:
                    register_field(spec)
            elif callable(spec):
                spec()
            else:
                raise InvalidArgument(f"entry point {ep.name!r}: {spec!r} is not a RequestField or a function")
    return sorted(set(REGISTRY) - before)
