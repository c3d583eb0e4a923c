"""The conformance gate passes only when a release's failures are exactly its recorded findings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GATE = Path(__file__).resolve().parent.parent / "ci" / "findings_gate.py"


def gate(tmp_path: Path, statuses: dict[str, str], recorded: list[str]) -> tuple[int, str]:
    report = {"properties": [{"id": k, "device": "cpu", "status": v, "message": "m", "reproduce": "r"}
                             for k, v in statuses.items()]}  # fmt: skip
    findings = {"findings": [{"property": p, "device": "cpu", "summary": "s"} for p in recorded]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    (tmp_path / "f.json").write_text(json.dumps(findings))
    proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "r.json"), str(tmp_path / "f.json")],
                          capture_output=True, text=True)  # fmt: skip
    return proc.returncode, proc.stdout


@pytest.mark.parametrize(
    ("statuses", "recorded", "code", "says"),
    [
        ({"P1": "passed", "P17": "failed"}, ["P17"], 0, "0 new, 0 not reproduced"),
        ({"P1": "passed", "P17": "passed"}, [], 0, "0 failing"),
        ({"P1": "error", "P17": "failed"}, ["P17"], 1, "NEW P1[cpu] error"),
        ({"P1": "passed", "P17": "passed"}, ["P17"], 1, "NOT REPRODUCED P17[cpu]"),
        ({"P1": "flaky"}, [], 1, "NEW P1[cpu] flaky"),
    ],
)
def test_gate(tmp_path: Path, statuses: dict[str, str], recorded: list[str], code: int, says: str) -> None:
    got, out = gate(tmp_path, statuses, recorded)
    assert got == code and says in out, out


def test_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(GATE), str(tmp_path / "no.json"), str(tmp_path / "no.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "cannot read input" in proc.stderr
