"""ci/gpu.sh installs nothing and downloads nothing; it says what is missing; it refuses unknown arguments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ci" / "gpu.sh"


def run(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHON": python, "OUT": "/tmp/pdverify-gpu-test"},
    )  # fmt: skip


def test_nothing_is_downloaded_or_installed() -> None:
    code = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"pip(3)? install|curl |wget |apt-get|conda install|uv pip", code), "gpu.sh must not install"
    assert "PIP_NO_INDEX=1" in code


def test_unknown_argument() -> None:
    proc = run("--fast")
    assert proc.returncode == 2 and "unknown argument --fast" in proc.stderr


def test_a_missing_package_is_named(tmp_path: Path) -> None:
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')
    bare.chmod(0o755)
    proc = run("--quick", python=str(bare))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "missing package(s): torch, hypothesis, pytest, numpy, xdist" in proc.stderr
