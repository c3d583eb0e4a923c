"""Every call into an SGLang function under test, checked against that function's own annotations.

With ``PDVERIFY_CHECK_ANNOTATIONS=PATH`` set, the profile hook that records the functions a property calls
(``pdverify.targets.calls``) also checks each call of a function of ``FUNCTION_SETS["sglang"]`` - every annotated
argument when it is entered, the return value when it returns - with typeguard's ``check_type``, and the run
writes what it saw to ``PATH`` (JSON) when the process ends: per function, the calls checked, the annotations that
could not be resolved (names imported only for type checkers), and each mismatch with the parameter, the
annotation and the type it got. A mismatch is classified: ``stand-in`` when the value is one of the driver's own
objects (a ``SimpleNamespace``, a mock, a class defined in pdverify) standing where SGLang's class is annotated - an
adapter shortcut the stand-in table documents - or ``mismatch`` otherwise (a finding, or an adapter bug: either way
never ignored; ``ci/conformance.sh`` fails on one).

typeguard, not beartype: it checks a value against an annotation on demand (``check_type``) without decorating or
re-importing the function, so the release's code runs unmodified and only the calls pdverify makes are checked;
beartype's checks are installed by decorating, which would replace the release's functions.
"""

from __future__ import annotations

import atexit
import dis
import importlib
import inspect
import json
import os
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType, FrameType, SimpleNamespace
from typing import Any

ENV = "PDVERIFY_CHECK_ANNOTATIONS"


@dataclass
class FunctionRecord:
    function: str
    calls: int = 0
    arguments_checked: int = 0
    returns_checked: int = 0
    unresolved: list[str] = field(default_factory=list)
    mismatches: list[dict[str, str]] = field(default_factory=list)


class AnnotationChecker:
    """The functions under test by code object, their resolved annotations, and what the checks found."""

    def __init__(self, specs: list[str]) -> None:
        self.by_code: dict[CodeType, tuple[FunctionRecord, dict[str, Any], inspect.Signature]] = {}
        self.records: list[FunctionRecord] = []
        self.missing: list[str] = []
        for spec in specs:
            fn = _resolve(spec)
            if fn is None:
                self.missing.append(spec)
                continue
            record = FunctionRecord(spec)
            hints = _hints(fn, record)
            self.by_code[fn.__code__] = (record, hints, inspect.signature(fn))
            self.records.append(record)

    def on_event(self, frame: FrameType, event: str, arg: Any) -> None:
        entry = self.by_code.get(frame.f_code)
        if entry is None:
            return
        record, hints, signature = entry
        if event == "call":
            record.calls += 1
            for name in signature.parameters:
                if name in hints and name in frame.f_locals:
                    record.arguments_checked += 1
                    self._check(record, name, frame.f_locals[name], hints[name])
        elif event == "return" and "return" in hints and _returned(frame):
            record.returns_checked += 1
            self._check(record, "return", arg, hints["return"])

    def _check(self, record: FunctionRecord, name: str, value: Any, hint: Any) -> None:
        from typeguard import TypeCheckError, check_type

        try:
            check_type(value, hint)
        except TypeCheckError as exc:
            kind = "stand-in" if _stand_in(value) else "mismatch"
            entry = {"parameter": name, "annotation": repr(hint), "got": type(value).__qualname__, "kind": kind,
                     "detail": str(exc)[:300]}  # fmt: skip
            if entry not in record.mismatches and len(record.mismatches) < 50:
                record.mismatches.append(entry)

    def summary(self) -> dict[str, Any]:
        mismatches = [m for r in self.records for m in r.mismatches]
        return {
            "functions": len(self.records),
            "calls": sum(r.calls for r in self.records),
            "arguments_checked": sum(r.arguments_checked for r in self.records),
            "returns_checked": sum(r.returns_checked for r in self.records),
            "stand_in_mismatches": sum(1 for m in mismatches if m["kind"] == "stand-in"),
            "mismatches": sum(1 for m in mismatches if m["kind"] == "mismatch"),
            "unresolved_annotations": sum(len(r.unresolved) for r in self.records),
            "not_found": self.missing,
            "per_function": [asdict(r) for r in self.records],
        }


_RETURNS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}


def _returned(frame: FrameType) -> bool:
    """Whether a profile ``return`` event is a return (the frame's last instruction returns a value), not an
    exception leaving the frame (whose event carries None)."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _RETURNS


def _resolve(spec: str) -> Any:
    module_name, _, qualname = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    obj = inspect.unwrap(obj.__func__ if inspect.ismethod(obj) else obj)  # a classmethod resolves bound
    return obj if inspect.isfunction(obj) else None


def _hints(fn: Any, record: FunctionRecord) -> dict[str, Any]:
    """The function's annotations evaluated in its module; one that cannot be (a name imported only under
    ``TYPE_CHECKING``) is left out and listed as unresolved."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    for name, text in getattr(fn, "__annotations__", {}).items():
        try:
            hints[name] = eval(text, dict(fn.__globals__)) if isinstance(text, str) else text
        except Exception:
            record.unresolved.append(f"{name}: {text}")
    return hints


def _stand_in(value: Any) -> bool:
    module = type(value).__module__ or ""
    return (
        isinstance(value, SimpleNamespace)
        or module.startswith(("unittest.mock", "pdverify"))
        or any(module.startswith(m) for m in ("tests.", "types"))
    )


CHECKER: AnnotationChecker | None = None


def checker() -> AnnotationChecker | None:
    """The process's checker when ``PDVERIFY_CHECK_ANNOTATIONS`` is set (built on first use, written at exit)."""
    global CHECKER
    path = os.environ.get(ENV)
    if not path:
        return None
    if CHECKER is None:
        from pdverify.cli.coverage import FUNCTION_SETS

        CHECKER = AnnotationChecker(FUNCTION_SETS["sglang"])
        target = Path(path)
        atexit.register(lambda: target.write_text(json.dumps(CHECKER.summary() if CHECKER else {}, indent=1) + "\n"))
    return CHECKER
