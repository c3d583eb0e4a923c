"""Which functions of the release under test a property called: recorded around each unit call of a release target, for
the run report (``calls`` per property).

``recording(fn, package, unit)`` wraps a target unit: while a recording is open on this thread (``open_recording``,
done by the pytest plugin around each property), the wrapped call runs under a profile hook that notes every Python
function of ``package`` entered, as ``module:qualname``, and whether the unit entered any: a unit whose calls enter
none drove nothing of the release (``undriven_units``; the run report calls such a property ``vacuous``). Left out:
what a first import inside the call runs (module and class bodies, decorators applied at import) and the functions
``dataclasses`` generates - not the release's code paths - and comprehensions and generator expressions, parts of
the function that holds them. Outside a recording the unit runs with no hook, so mutant runs and library use pay
nothing.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_SKIPPED = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


class _Recording(threading.local):
    names: set[str] | None = None
    units: dict[str, bool] | None = None
    """Per named unit called since ``open_recording``: whether any of its calls entered a function of the package."""


RECORDING = _Recording()


def _importing(frame: FrameType, outer: FrameType) -> bool:
    """Whether ``frame`` runs under a module body (an import) below the unit's call (``outer``)."""
    caller = frame.f_back
    while caller is not None and caller is not outer:
        if caller.f_code.co_name == "<module>":
            return True
        caller = caller.f_back
    return False


def open_recording() -> None:
    """Start a fresh record of calls on this thread. The annotation checker, where one is asked for, is built here,
    before any call is recorded: building it imports the modules of every function under test, and an import inside
    a recorded call would run inside what the property measures (a transfer ledger counted a module's import-time
    tensors as the unit's copies)."""
    from pdverify.targets.annotations import checker

    checker()
    RECORDING.names = set()
    RECORDING.units = {}


def close_recording() -> list[str]:
    """The functions called since ``open_recording``, sorted; closes the record."""
    names, RECORDING.names, RECORDING.units = RECORDING.names, None, None
    return sorted(names or ())


def undriven_units() -> list[str]:
    """The named units called since ``open_recording`` whose calls entered no function of their package - a unit
    that stands in for the release's code instead of driving it - sorted (read before ``close_recording``)."""
    return sorted(unit for unit, entered in (RECORDING.units or {}).items() if not entered)


def recording(fn: F, package: str, unit: str = "") -> F:
    """``fn``, noting each function of ``package`` (a top-level package name) its calls enter, and, for a named
    ``unit``, whether its calls entered any (``undriven_units``)."""
    if not package or "." in package:
        raise ValueError(f"package must be a top-level package name, got {package!r}")
    prefix = package + "."

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        names = RECORDING.names
        if names is None:
            return fn(*args, **kwargs)
        from pdverify.targets.annotations import checker

        annotations = checker()
        entered = False

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal entered
            if annotations is not None and event in ("call", "return"):
                annotations.on_event(frame, event, arg)
            if event == "call" and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
                module = frame.f_globals.get("__name__", "")
                if module.startswith(prefix) or module == package:
                    qualname = frame.f_code.co_qualname
                    generated = qualname.endswith(_SKIPPED) or qualname.startswith("__create_fn__")
                    if not generated and not _importing(frame, outer):
                        names.add(f"{module}:{qualname}")
                        entered = True

        outer = sys._getframe()
        previous = sys.getprofile()
        sys.setprofile(hook)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)
            units = RECORDING.units
            if unit and units is not None:
                units[unit] = units.get(unit, False) or entered

    return call  # type: ignore[return-value]
