"""Exported regressions are drop-in pytest files: one per failing property, ruff clean under the project's config,
failing on the faulty target and passing under ``-W error`` once pointed at a fixed one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pdverify.cli.export import layout
from pdverify.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)


def test_a_legacy_run_exports_one_clean_file_per_failure(tmp_path: Path) -> None:
    faulty, fixed = tmp_path / "legacy", tmp_path / "fixed"
    report = tmp_path / "r.json"
    args = ["check", "--target", "legacy", "--profile", "ci", "--device", "cpu", "--report", str(report)]
    assert main([*args, "--export-regressions", str(faulty)]) == 1
    failed = [p for p in json.loads(report.read_text())["properties"] if p["status"] == "failed"]
    files = sorted(faulty.glob("test_regression_*.py"))
    assert len(files) == len(failed) >= 7, ([p["id"] for p in failed], [f.name for f in files])
    ruff = [sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"), str(faulty)]
    lint = subprocess.run(ruff, capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout
    before = _pytest(str(faulty))
    assert f"{len(files)} failed" in before.stdout, before.stdout[-2000:]
    fixed.mkdir()
    for f in files:
        (fixed / f.name).write_text(f.read_text().replace('TARGET = "legacy"', 'TARGET = "pdverify"'))
    after = _pytest(str(fixed))
    assert after.returncode == 0 and f"{len(files)} passed" in after.stdout, after.stdout[-3000:]
    shutil.rmtree(tmp_path)


def test_layout_breaks_only_what_does_not_fit() -> None:
    assert layout("f(a=[1, 2], b=3)", 8) == "f(a=[1, 2], b=3)"
    wide = layout(f"Case(row={list(range(60))}, name='x')", 8, 5)
    lines = wide.splitlines()
    assert lines[0] == "Case(" and lines[-1] == "        )", wide
    assert all(len(line) <= 120 for line in lines[1:]), wide
    assert eval(wide, {"Case": lambda row, name: (row, name)}) == (list(range(60)), "x")


def test_layout_of_dicts_and_nested_calls() -> None:
    text = layout("{'a': " + str(list(range(50))) + ", 'b': 2}", 4)
    assert text.startswith("{\n") and eval(text) == {"a": list(range(50)), "b": 2}


def test_a_counterexample_that_does_not_rebuild_is_named_not_skipped_silently(tmp_path: Path) -> None:
    from pdverify.cli.export import NOT_EXPORTABLE, counterexample_literals, export_regressions
    from pdverify.cli.report import PropertyResult

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque(<no way back>)"

    literals = counterexample_literals({"target": None, "case": Opaque()})
    assert literals is not None and NOT_EXPORTABLE in literals
    failed = PropertyResult("P1", "t", "test_p1_x", "cpu", "failed", 3, 0.1, kwargs=literals)
    never = PropertyResult("P2", "t", "test_p2_y", "cpu", "failed", 3, 0.1)
    written, skipped = export_regressions(tmp_path, "pdverify", [failed, never])
    assert written == [] and len(skipped) == 2
    assert "P1 (test_p1_x): not exported: cannot rebuild Opaque" in skipped[0]
    assert "P2 (test_p2_y): not exported: no counterexample was captured" in skipped[1]
