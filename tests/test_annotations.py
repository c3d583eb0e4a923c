"""The annotation check: every call into a function under test is checked against its own annotations (typeguard);
a mismatch names the parameter, the annotation and the type, and says whether a driver's stand-in caused it."""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from pdverify.targets.annotations import AnnotationChecker

ROOT = Path(__file__).resolve().parent.parent

MODULE = """
from __future__ import annotations

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elsewhere import Hidden


def pages(kv: np.ndarray, page_size: int) -> np.ndarray:
    return kv[::page_size] // page_size


def lies(n: int) -> str:
    return n  # annotated str, returns an int


def hidden(x: Hidden, n: int) -> None:
    if n < 0:
        raise ValueError("negative")
"""


def _checked(tmp_path: Path, calls: Any) -> dict[str, Any]:
    (tmp_path / "annotated_release.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        mod: Any = importlib.import_module("annotated_release")

        checker = AnnotationChecker(
            ["annotated_release:pages", "annotated_release:lies", "annotated_release:hidden", "annotated_release:gone"]
        )
        previous = sys.getprofile()
        sys.setprofile(
            lambda frame, event, arg: checker.on_event(frame, event, arg) if event in ("call", "return") else None
        )
        try:
            calls(mod)
        finally:
            sys.setprofile(previous)
        return checker.summary()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("annotated_release", None)


def test_calls_are_checked_and_mismatches_classified(tmp_path: Path) -> None:
    def calls(mod: Any) -> None:
        mod.pages(np.arange(8), 4)
        mod.lies(3)
        mod.hidden(object(), 1)
        with contextlib.suppress(ValueError):
            mod.hidden(object(), -1)  # an exception leaving the frame is not a return of None
        with contextlib.suppress(TypeError):
            mod.pages(SimpleNamespace(__getitem__=None), 2)  # a stand-in where an ndarray is annotated

    summary = _checked(tmp_path, calls)
    rows = {r["function"].split(":")[1]: r for r in summary["per_function"]}
    assert summary["not_found"] == ["annotated_release:gone"]
    assert rows["pages"]["calls"] == 2 and rows["pages"]["returns_checked"] == 1
    assert [m["kind"] for m in rows["pages"]["mismatches"]] == ["stand-in"]
    (lie,) = rows["lies"]["mismatches"]
    assert (lie["parameter"], lie["got"], lie["kind"]) == ("return", "int", "mismatch")
    assert rows["hidden"]["unresolved"] == ["x: Hidden"] and rows["hidden"]["mismatches"] == []
    assert summary["mismatches"] == 1 and summary["stand_in_mismatches"] == 1


def test_the_gate_fails_on_an_unrecorded_mismatch(tmp_path: Path) -> None:
    report = {"mismatches": 1, "per_function": [{"function": "m:f", "mismatches": [
        {"parameter": "x", "annotation": "int", "got": "str", "kind": "mismatch", "detail": "d"}]}]}  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(report))
    (tmp_path / "known.json").write_text(json.dumps({"recorded": []}))
    gate = [
        sys.executable,
        str(ROOT / "ci" / "annotations_gate.py"),
        str(tmp_path / "a.json"),
        str(tmp_path / "known.json"),
    ]
    done = subprocess.run(gate, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "UNRECORDED m:f(x): annotated int, got str" in done.stdout
    (tmp_path / "known.json").write_text(json.dumps({"recorded": [{"function": "m:f", "parameter": "x", "got": "str",
                                                                   "why": "upstream annotation"}]}))  # fmt: skip
    done = subprocess.run(gate, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_the_checker_is_built_before_any_recorded_call(tmp_path: Path, monkeypatch: Any) -> None:
    """Building the checker imports the modules of every function under test; it happens when recording opens, so
    no import runs inside a recorded call - where a property may be measuring (B1's transfer ledger once counted a
    module's import-time tensors as copies of ``kv_to_page_indices``)."""
    import atexit

    import pdverify.targets.annotations as checking
    from pdverify.targets import calls

    monkeypatch.setenv(checking.ENV, str(tmp_path / "annotations.json"))
    monkeypatch.setattr(checking, "CHECKER", None)
    monkeypatch.setattr(atexit, "register", lambda fn: fn)
    calls.open_recording()
    try:
        assert checking.CHECKER is not None
        built = checking.CHECKER
        calls.recording(lambda: None, "sglang")()
        assert checking.CHECKER is built
    finally:
        calls.close_recording()
