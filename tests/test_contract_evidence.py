"""Every release boundary has its upstream evidence, and no fix bounds a contract.

``pdverify/properties/contract_evidence.json`` names, for each ``Contract`` in ``releases.py``, the upstream change
behind it: PR, title, commit, first release and its kind - ``feature`` (a new input domain or unit), ``intended
change`` (a field renamed or removed by design) or ``fix``. Only a feature or an intended change may bound what a
property checks: before a fix, a release is defective wherever the input that exposes it is reachable, so a fix may
bound an input domain (what the release can be given) but never a contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdverify.properties import releases
from pdverify.runner import load_properties
from tests.ci_scripts import load_ci_script

EVIDENCE = json.loads((Path(releases.__file__).parent / "contract_evidence.json").read_text())["boundaries"]
BY_NAME = {b["contract"]: b for b in EVIDENCE}
CONTRACTS = {name: c for name, c in vars(releases).items() if isinstance(c, releases.Contract) and c.since}


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_every_boundary_has_evidence(name: str) -> None:
    entry = BY_NAME.get(name)
    assert entry is not None, f"{name} ({CONTRACTS[name]}) has no entry in contract_evidence.json"
    assert entry["kind"] in ("feature", "intended change", "fix"), entry
    assert entry["first_release"] == CONTRACTS[name].since, (name, entry["first_release"], CONTRACTS[name].since)
    assert entry["evidence"] and (entry["pr"] is None or isinstance(entry["pr"], int)), entry


def test_no_property_is_bounded_by_a_fix() -> None:
    for info in load_properties().values():
        for clause in info.clauses:  # a property's own contract is its one clause's
            name = next((n for n, c in CONTRACTS.items() if c is clause.contract), None)
            if name is None:
                continue
            kind = BY_NAME[name]["kind"]
            assert kind != "fix", (
                f"{info.id} ({clause.name}) is bounded by {name}, a fix ({BY_NAME[name]['title']}): it applies "
                "to every release"
            )
    gated_by_fix = [b["contract"] for b in EVIDENCE if b.get("gate") == "contract" and b["kind"] == "fix"]
    assert not gated_by_fix, f"contract boundaries of kind fix: {gated_by_fix}"


def test_every_contract_entry_names_a_contract() -> None:
    contracts = {b["contract"] for b in EVIDENCE if b.get("gate") in ("contract", "domain")}
    assert contracts == set(CONTRACTS), contracts ^ set(CONTRACTS)


def test_the_docs_show_what_the_evidence_file_holds() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "ci" / "docs_figures.py"), "--check"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_every_driver_gate_names_the_release_the_code_uses() -> None:
    from pdverify.targets import sglang_release

    gates = {b["contract"].split(" ")[0]: b for b in EVIDENCE if b.get("gate") == "unit"}
    constants = {n: v for n, v in vars(sglang_release).items() if n.endswith(("DRIVER_FROM", "DRIVERS_FROM"))}
    assert constants, "sglang_release has no driver gates"
    for name, since in constants.items():
        assert name in gates, f"{name} (sglang_release.py) has no unit entry in contract_evidence.json"
        assert gates[name]["first_release"] == since, (name, gates[name]["first_release"], since)
        assert gates[name]["units"], f"{name}: the evidence names no unit"


def test_the_matrix_block_groups_releases_with_the_same_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = load_ci_script("docs_figures")
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    assert figures.matrix_table() is None  # no matrix run here: the block keeps the last run's figures
    (tmp_path / "reports" / "matrix").mkdir(parents=True)
    matrix = load_ci_script("conformance_matrix")
    units = {"a": "no driver for this form", "b": "no driver for that form", "c": "sglang.srt.x.f"}
    clauses = [{"status": "passed"}] * 5
    passing = {f"P{i}": {"status": "passed", "clauses": clauses[:2] if i == 1 else clauses[:1]} for i in range(1, 5)}
    na = {f"N{i}": {"status": "not applicable", "message": "no driver for sglang's form"} for i in range(2)}
    rows = [{"release": r, "properties": {**passing, **na}, "units": units} for r in ("0.5.1", "0.5.2")]
    failing = {**passing, "P4": {"status": "known defect", "findings": {"T9": {"reproduced": True}}}}
    rows.append({"release": "0.5.3", "properties": {**failing, **na}, "units": units})
    triaged = {("0.5.3", "P4"): [{"id": "T9"}]}
    releases = [{"release": r["release"], "verdict": matrix.verdict_facts(r, triaged)} for r in rows]
    releases.append({"release": "0.4.0", "verdict": matrix.verdict_facts({"release": "0.4.0", "reason": "x"}, {})})
    (tmp_path / "reports" / "matrix" / "releases.json").write_text(json.dumps(releases))
    assert matrix.verdict(rows[2], triaged) == (
        "* **0.5.3**: defects: T9 (3 passed of 4 checked properties, 4 of 4 clauses); not applicable: 2 no driver; "
        "units: 1 driven of 3 present (not driven: a, b)"
    )
    summary = {"pairs": 2, "differences": 1, "unexplained": 0, "examples": 40, "wall_s": 9}
    (tmp_path / "reports" / "matrix" / "diffs.json").write_text(json.dumps({"summary": summary}))
    table = figures.matrix_table()
    assert table is not None
    assert "| 0.5.1 - 0.5.2 (2) | sound | 4 passed of 4 checked properties, 5 of 5 clauses | 2 no driver |" in table
    assert "1 driven of 3 present |" in table
    assert (
        "| 0.5.3 | defects: T9 |" in table
        and "3 releases. Differential: 2 pairs, 1 differences, 0 unexplained" in table
    )
