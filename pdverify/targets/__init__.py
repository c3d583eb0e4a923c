"""Targets: the implementations the property suite runs against."""

from __future__ import annotations

import importlib

from pdverify.targets.builtin import BUILTIN
from pdverify.targets.protocol import FUNCTIONS, NotApplicable, ServerRefuses, Target, TargetError

__all__ = ["BUILTIN", "FUNCTIONS", "NotApplicable", "ServerRefuses", "Target", "TargetError", "load_target"]


def load_target(spec: str | Target) -> Target:
    """A built-in target by name, ``mutant:ID`` (a catalogued mutant), ``sglang-plant:ID`` (the installed SGLang
    with a second defect planted behind a recorded finding, ``pdverify.mutants.sglang_plants``), or
    ``package.module:attr`` naming a ``Target`` (or a function returning one)."""
    if isinstance(spec, Target):
        return spec
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec.startswith("mutant:"):
        from pdverify.mutants.catalogue import load_all, mutant_target

        ident = spec.partition(":")[2]
        if ident not in load_all():
            raise TargetError(f"unknown target {spec!r}: no mutant {ident!r} in the catalogue")
        return mutant_target(ident)
    if spec.startswith("sglang-plant:"):
        from pdverify.mutants.sglang_plants import planted_target

        return planted_target(spec.partition(":")[2])
    if ":" not in spec:
        raise TargetError(f"unknown target {spec!r}: use one of {', '.join(BUILTIN)} or 'package.module:attr'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a user's module is a load failure
        raise TargetError(f"target {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"target {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Target):
        try:
            obj = obj()
        except Exception as exc:
            raise TargetError(f"target {spec!r}: calling {attr} to build the target failed: {exc}") from exc
    if not isinstance(obj, Target):
        raise TargetError(f"target {spec!r}: {attr} is a {type(obj).__name__}, not a pdverify Target")
    return obj
