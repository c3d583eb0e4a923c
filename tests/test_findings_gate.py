"""The conformance gate, per finding: a release passes only when each recorded finding reproduced (counted by its
signature) and nothing else failed; with ``--fixed`` a patched release must no longer reproduce that finding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GATE = Path(__file__).resolve().parent.parent / "ci" / "findings_gate.py"


def _row(pid: str, status: str, findings: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    counts = {k: {"matched": m, "reproduced": r} for k, (m, r) in (findings or {}).items()}
    return {"id": pid, "device": "cpu", "status": status, "message": "m", "reproduce": "r", "findings": counts}


def gate(tmp_path: Path, rows: list[dict[str, Any]], recorded: list[str], *extra: str) -> tuple[int, str]:
    (tmp_path / "r.json").write_text(json.dumps({"known_findings": "apply", "properties": rows}))
    findings = {"findings": [{"id": f"F{i}", "property": p, "summary": "s"} for i, p in enumerate(recorded, 1)]}
    (tmp_path / "f.json").write_text(json.dumps(findings))
    proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "r.json"), str(tmp_path / "f.json"), *extra],
                          capture_output=True, text=True)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("rows", "recorded", "extra", "code", "says"),
    [
        ([_row("P1", "passed"), _row("D1", "known defect", {"F1": (9, 7)})], ["D1"], (), 0, "reproduced on 7 examples"),
        ([_row("P1", "passed")], [], (), 0, "0 recorded, 0 new failures"),
        ([_row("P1", "error"), _row("D1", "known defect", {"F1": (9, 7)})], ["D1"], (), 1, "NEW P1[cpu] error"),
        # a second defect in the property that holds the finding: new, though the finding reproduced too
        ([_row("D1", "failed", {"F1": (9, 7)})], ["D1"], (), 1, "NEW D1[cpu] failed"),
        ([_row("D1", "passed", {"F1": (9, 0)})], ["D1"], (), 1, "NOT REPRODUCED"),
        ([_row("P1", "flaky")], [], (), 1, "NEW P1[cpu] flaky"),
        ([_row("D1", "passed", {"F1": (9, 0)})], ["D1"], ("--fixed", "F1"), 0, "fixed by patch"),
        ([_row("D1", "known defect", {"F1": (9, 2)})], ["D1"], ("--fixed", "F1"), 1, "STILL REPRODUCES"),
        ([_row("D1", "passed", {"F1": (9, 0)})], ["D1"], ("--fixed", "F9"), 2, "names no recorded finding: F9"),
    ],
)
def test_gate(
    tmp_path: Path, rows: list[dict[str, Any]], recorded: list[str], extra: tuple[str, ...], code: int, says: str
) -> None:
    got, out = gate(tmp_path, rows, recorded, *extra)
    assert got == code and says in out, out


def test_a_run_that_ignored_the_findings_cannot_be_gated(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"known_findings": "ignore", "properties": []}))
    (tmp_path / "f.json").write_text(json.dumps({"findings": []}))
    proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "r.json"), str(tmp_path / "f.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "--known-findings ignore" in proc.stderr


def test_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "no.json"), str(tmp_path / "no.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "cannot read input" in proc.stderr


def test_the_search_past_a_recorded_finding_is_not_a_filtering_strategy() -> None:
    """A property with a finding recorded on the bound release sets its reproduced examples aside (``assume``) so the
    search goes on past it; where the defect shows on nearly every input that must not trip Hypothesis'
    filter-too-much health check (T9 on 0.4.5.post2's S11). Elsewhere the health check stays on."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from pdverify.plugin import bind_profile

    def prop(x: int) -> None:
        pass

    for searching_past in (False, True):
        test: Any = given(x=st.integers())(prop)
        test.pdverify_property = "S11"
        bind_profile(test, searching_past=searching_past)
        checks = test._hypothesis_internal_use_settings.suppress_health_check
        assert HealthCheck.function_scoped_fixture in checks
        assert (HealthCheck.filter_too_much in checks) is searching_past
    assert settings.default is not None


def test_a_finding_two_properties_observe_is_one_verdict(tmp_path: Path) -> None:
    rows = [_row("Q7", "known defect", {"F8": (22, 22)}), _row("X2", "known defect", {"F8": (27, 24)})]
    (tmp_path / "r.json").write_text(json.dumps({"known_findings": "apply", "properties": rows}))
    entries = [{"id": "F8", "property": p, "summary": "s"} for p in ("X2", "Q7")]
    (tmp_path / "f.json").write_text(json.dumps({"findings": entries}))
    for extra, code, says in (((), 0, "reproduced on 46 examples"), (("--fixed", "F8"), 1, "STILL REPRODUCES")):
        proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "r.json"), str(tmp_path / "f.json"), *extra],
                              capture_output=True, text=True)  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == code, out
        assert "1 recorded" in out and out.count("  F8 ") == 1 and says in out and "X2, Q7 (Q7[cpu], X2[cpu])" in out
