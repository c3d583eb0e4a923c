"""The request-field registry: add a request field in one place and every batch strategy draws it.

A field states its strategy (what values to generate), its default (what a request without it holds) and
its expected effect (the value ``prepare_for_prebuilt`` must leave it at; by default: unchanged). Layout
adapters set registered fields as attributes on the duck-typed request, so a target's code can read them,
and property P30 checks the expected effect on every target.

>>> from hypothesis import strategies as st
>>> register_field(RequestField("priority", st.integers(0, 3), default=0))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument


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
