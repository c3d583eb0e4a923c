"""``pdverify fuzz``: HypoFuzz over the shipped properties; what it records is read back; what it finds is
replayed by ``pdverify check`` from the same example database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis.database import InMemoryExampleDatabase

from pdverify.cli import exitcodes
from pdverify.cli.fuzz import _keys, read_campaign
from pdverify.cli.main import main

hypofuzz = pytest.importorskip("hypofuzz")


def test_campaign_figures_are_read_back_per_worker() -> None:
    from hypofuzz.database import HypofuzzDatabase, Phase, Report, StatusCounts
    from hypothesis.internal.conjecture.data import Status

    db = InMemoryExampleDatabase()
    keys = _keys()
    key, nodeid = keys["P19"]
    assert nodeid == "test_prebuilt.py::test_p19_out_cache_loc[cpu]"
    hdb = HypofuzzDatabase(db)

    def report(worker: str, elapsed: float, passed: int, behaviors: int) -> Report:
        counts = StatusCounts({s: 0 for s in Status})
        counts[Status.VALID] = passed
        return Report(database_key="k", nodeid=nodeid, elapsed_time=elapsed, timestamp=1.0, worker_uuid=worker,
                      status_counts=counts, behaviors=behaviors, fingerprints=behaviors // 2,
                      since_new_behavior=0, phase=Phase.GENERATE)  # fmt: skip

    for rep in (report("w-one-aaaa", 10, 100, 30), report("w-one-aaaa", 20, 300, 40), report("w-two-bbbb", 10, 50, 35)):
        hdb.reports.save(key, rep)
    db.save(key, b"a failure")
    (row,) = read_campaign(db, keys)
    assert (row.id, row.examples, row.behaviors, row.fingerprints, row.failures) == ("P19", 350, 40, 20, 1)
    assert row.workers == {"w-one-aa": 15.0, "w-two-bb": 5.0}


def test_fuzz_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fuzz", "--minutes", "0"])
    assert exit_info.value.code == exitcodes.USAGE
    assert "--minutes: 0 must be > 0" in capsys.readouterr().err


def test_a_failure_found_by_the_campaign_is_replayed_by_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planted fault no explicit example reaches: the campaign finds and stores it, check replays it first."""
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    monkeypatch.setenv("PDVERIFY_DB_DIR", str(tmp_path / "db"))
    monkeypatch.setenv("CI", "true")  # the campaign must not inherit Hypothesis's derandomized ci profile
    target = "tests.user_targets:rare_fault"
    code = main(["fuzz", "--target", target, "--minutes", "0.75", "--workers", "1", "-k", "p1_", "--sample", "15",
                 "--json", str(tmp_path / "campaign.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == exitcodes.FAILED, out
    assert "failure in P1: replay it with" in out
    campaign = json.loads((tmp_path / "campaign.json").read_text())
    (p1,) = [p for p in campaign["properties"] if p["id"] == "P1"]
    assert p1["failures"] >= 1 and p1["examples"] > 0 and campaign["timeline"]
    env = {**os.environ, "PDVERIFY_DB_DIR": str(tmp_path / "db")}
    check = subprocess.run(
        [sys.executable, "-m", "pdverify.cli.main", "check", "--target", target, "--profile", "thorough", "--device",
         "cpu", "-k", "p1_", "--report", str(tmp_path / "replay.json")],
        env=env, capture_output=True, text=True, timeout=240, cwd=root,
    )  # fmt: skip
    assert check.returncode == exitcodes.FAILED, check.stdout
    (replay,) = json.loads((tmp_path / "replay.json").read_text())["properties"]
    # P1's four explicit examples run first and pass; the campaign's stored failure is the next example
    assert replay["status"] == "failed" and replay["first_failure"] == 5, replay
