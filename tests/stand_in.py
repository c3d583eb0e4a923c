"""A stand-in ``sglang`` package and target on disk, and ``pdverify check`` run on it in a subprocess (the real
import path a release target takes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_check_on_stand_in(
    tmp_path: Path, common_source: str, target_source: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Write ``sglang/srt/mem_cache/common.py`` and ``stand_in_target.py`` under ``tmp_path``, run ``pdverify
    check --target stand_in_target:target --profile ci --device cpu ARGS``; the process and the report's path."""
    pkg = tmp_path / "sglang" / "srt" / "mem_cache"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "sglang", tmp_path / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "common.py").write_text(common_source)
    (tmp_path / "stand_in_target.py").write_text(target_source)
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "stand_in_target:target", "--profile",
           "ci", "--device", "cpu", "--report", str(report), *args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parent.parent}"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False), report
