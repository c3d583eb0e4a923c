"""An interrupted run is never green: a real SIGINT or SIGTERM to a real ``pdverify check`` process, serial and
under pytest-xdist, ends it with 130 / 143, a report whose status is ``interrupted``, and no ``passed`` for a
property that did not finish.

The signal is sent once the run is known to be inside a property (the test's own target blocks in its first
example and writes a marker file): no sleep decides when, so the verdict does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pdverify.cli.report import SCHEMA_PATH

ROOT = Path(__file__).resolve().parent.parent

BLOCKING_TARGET = """
import os, pathlib, time
from pdverify.targets import load_target

def floor(n, page_size):
    pathlib.Path(os.environ["PDVERIFY_TEST_MARKER"]).write_text("inside")
    while True:  # blocks until the signal arrives
        time.sleep(0.05)

target = load_target("pdverify").derive("blocks-in-p6", page_align_floor=floor)
"""


def _interrupt(tmp_path: Path, sig: signal.Signals, jobs: int) -> tuple[int, str, dict[str, Any]]:
    (tmp_path / "blocking_target.py").write_text(BLOCKING_TARGET)
    marker, report = tmp_path / "inside", tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}", "PDVERIFY_TEST_MARKER": str(marker)}
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "blocking_target:target", "--profile",
           "ci", "--device", "cpu", "--timeout", "0", "-k", "p1_ or p5_ or p6_ or p7_ or p8_", "-n", str(jobs),
           "--report", str(report)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the blocking property never started"
        time.sleep(0.05)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    data = json.loads(report.read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return proc.returncode, out, data


@pytest.mark.parametrize("jobs", [0, 2], ids=["serial", "xdist"])
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_run_is_an_interrupted_run(tmp_path: Path, sig: signal.Signals, code: int, jobs: int) -> None:
    rc, out, report = _interrupt(tmp_path, sig, jobs)
    assert rc == code, out
    assert report["status"] == "interrupted" and report["exit_code"] == code
    rows = {p["id"]: p for p in report["properties"]}
    assert rows["P6"]["status"] == "interrupted", rows["P6"]
    assert f"interrupted by {sig.name}" in rows["P6"]["message"]
    # whatever finished passed; nothing unfinished says so; the ones never started are "not run"
    assert {p["status"] for p in rows.values()} <= {"passed", "interrupted", "not run"}
    assert len(rows) == 5, sorted(rows)
    assert f"interrupted by {sig.name} after" in out and "Traceback" not in out
    assert "passed" not in [line.split()[-2] for line in out.splitlines() if line.startswith("P6 ")]


BLOCKING_IMPORT = """
import os, pathlib, time

pathlib.Path(os.environ["PDVERIFY_TEST_MARKER"]).write_text("importing")
while True:  # the target's module never finishes importing
    time.sleep(0.05)
"""


def test_a_signal_before_any_property_writes_an_interrupted_report(tmp_path: Path) -> None:
    (tmp_path / "slow_import_target.py").write_text(BLOCKING_IMPORT)
    marker, report = tmp_path / "inside", tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}", "PDVERIFY_TEST_MARKER": str(marker)}
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "slow_import_target:target", "--device",
           "cpu", "--report", str(report)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    data = json.loads(report.read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    assert data["status"] == "interrupted" and data["exit_code"] == 130 and data["properties"] == []
    assert "interrupted by SIGINT before any property ran" in out and "Traceback" not in out
