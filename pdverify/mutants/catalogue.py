"""The mutant registry: ``@mutant(id, function, fault_class, description)`` on a faulty implementation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pdverify.targets import Target
from pdverify.targets.builtin import pdverify_target

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Mutant:
    id: str
    function: str
    fault_class: str
    description: str
    impl: Callable[..., Any]


CATALOGUE: dict[str, Mutant] = {}


def mutant(id: str, function: str, fault_class: str, description: str) -> Callable[[F], F]:
    def register(fn: F) -> F:
        if id in CATALOGUE:
            raise ValueError(f"mutant id {id!r} registered twice")
        CATALOGUE[id] = Mutant(id, function, fault_class, description, fn)
        return fn

    return register


def mutant_target(m: Mutant | str) -> Target:
    """The ``pdverify`` target with the mutant's function replaced."""
    load_all()
    mut = CATALOGUE[m] if isinstance(m, str) else m
    return pdverify_target().derive(f"mutant:{mut.id}", mut.description, **{mut.function: mut.impl})


def load_all() -> dict[str, Mutant]:
    from pdverify.mutants import (  # noqa: F401 - registration side effect
        checksum,
        dispatch,
        exchange,
        page_index,
        prebuilt,
        queue,
        transfer,
        transfer_queue,
        translate,
    )

    return CATALOGUE
