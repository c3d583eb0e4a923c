"""Run one property against one target directly (no pytest), with a chosen settings profile.

Used by ``pdverify mutate`` and by the suite's own tests; ``pdverify check`` goes through pytest.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings

from pdverify.local_constants import pin_local_constants
from pdverify.plugin import refusals_discarded
from pdverify.profiles import restoring_default_profile  # importing it registers the profiles
from pdverify.properties.registry import (
    EXAMPLES,
    PropertyInfo,
    all_discarded,
    discarded_message,
    reset_examples,
)
from pdverify.targets import Target


@dataclass(frozen=True)
class PropertyRun:
    property: str
    status: str
    """``passed``, ``failed``, ``not applicable`` or ``no examples``."""
    examples: int
    seconds: float
    message: str = ""
    first_failure: int | None = None
    """The example count at the first failing example (before shrinking)."""


def run_property(
    info: PropertyInfo, target: Target, device: str = "cpu", profile: str = "mutate", seed: int | None = None
) -> PropertyRun:
    """Run ``info`` on ``target`` under Hypothesis profile ``profile`` (``seed``: the generation's seed, for a
    profile that is not derandomized); a failure's message holds the shrunk counterexample Hypothesis reported."""
    missing = [fn for fn in info.needs if not target.supplies(fn)]
    if missing:
        return PropertyRun(info.id, "not applicable", 0, 0.0, f"target lacks {', '.join(missing)}")
    out_of_range = info.not_applicable(target.release)
    if out_of_range:
        return PropertyRun(info.id, "not applicable", 0, 0.0, out_of_range)
    pin_local_constants()
    test: Any = info.test
    saved_seed = getattr(test, "_hypothesis_internal_use_seed", None)
    if seed is not None:
        test._hypothesis_internal_use_seed = seed
        EXAMPLES.seed = seed  # the state machine reads its seed here
    saved = getattr(test, "_hypothesis_internal_use_settings", None)
    reset_examples()
    start = time.perf_counter()
    try:
        with restoring_default_profile():
            if saved is not None:
                # Rebind the profile for this call only (settings are otherwise fixed at decoration time).
                test._hypothesis_internal_use_settings = settings.get_profile(profile)
            else:  # a test that reads settings.default at run time (the state machine)
                settings.load_profile(profile)
            test(target=refusals_discarded(target), device=device)  # refused configurations: discarded
    except pytest.skip.Exception as exc:
        return PropertyRun(info.id, "not applicable", EXAMPLES.examples, time.perf_counter() - start, str(exc))
    except BaseException as exc:  # a property failure or an exception raised inside the target
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        if all_discarded(EXAMPLES.examples, EXAMPLES.outside, EXAMPLES.refused):  # Hypothesis gave up
            return _all_discarded(info.id, time.perf_counter() - start)
        return PropertyRun(
            info.id,
            "failed",
            EXAMPLES.examples,
            time.perf_counter() - start,
            describe_failure(exc),
            EXAMPLES.first_failure,
        )
    finally:
        if saved is not None:
            test._hypothesis_internal_use_settings = saved
        if seed is not None:
            test._hypothesis_internal_use_seed = saved_seed
            EXAMPLES.seed = None
    seconds = time.perf_counter() - start
    if all_discarded(EXAMPLES.examples, EXAMPLES.outside, EXAMPLES.refused):
        return _all_discarded(info.id, seconds)
    return PropertyRun(info.id, "passed" if EXAMPLES.examples else "no examples", EXAMPLES.examples, seconds)


def _all_discarded(property_id: str, seconds: float) -> PropertyRun:
    """No example ran: each was outside the target release's domain or refused by its server."""
    why = discarded_message(EXAMPLES.examples, EXAMPLES.outside, EXAMPLES.refused, EXAMPLES.refusal)
    return PropertyRun(property_id, "no examples", EXAMPLES.examples, seconds, why)


def describe_failure(exc: BaseException) -> str:
    """The exception's one-line text and Hypothesis's notes (the falsifying example), for each failure of
    an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return "\n\n".join(describe_failure(e) for e in exc.exceptions)
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    notes = "\n".join(getattr(exc, "__notes__", []))
    return f"{text}\n{notes}".strip()


def load_properties() -> dict[str, PropertyInfo]:
    """Import every property module and return the registry, in declaration order."""
    import importlib
    import pkgutil

    import pdverify.properties as package
    from pdverify.properties.registry import PROPERTIES

    for mod in pkgutil.iter_modules(package.__path__):
        if mod.name.startswith("test_"):
            importlib.import_module(f"{package.__name__}.{mod.name}")
    return PROPERTIES
