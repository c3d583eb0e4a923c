"""The same derandomized check of the same code draws the same inputs whether that code lies in a venv's
site-packages or on ``PYTHONPATH`` (as the release matrix lays releases out): Hypothesis mines literal constants
only from pdverify's own modules (``pdverify.local_constants``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pdverify.local_constants import pin_local_constants, suite_module_file

ROOT = Path(__file__).resolve().parent.parent

PACKAGE = '''"""A stand-in release: literal constants Hypothesis would mine if it took this module for local code."""

from pdverify.targets import load_target

LIMITS = (3, 5, 6, 7, 9, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


def page_align_floor(n: int, page_size: int) -> int:
    if n in (101, 103, 107, 109, 113, 127, 131):
        return n - n % page_size
    return (n // page_size) * page_size


target = load_target("pdverify").derive("layout-stand-in", page_align_floor=page_align_floor)
'''


def _run(tmp_path: Path, layout: str, *, hypothesis_rule: bool = False) -> dict[str, Any]:
    base = tmp_path / layout / ("lib/python3/site-packages" if layout == "site" else "")
    (base / "layout_release").mkdir(parents=True)
    (base / "layout_release" / "__init__.py").write_text(PACKAGE)
    report = tmp_path / f"{layout}-{hypothesis_rule}.json"
    env = {**os.environ, "PYTHONPATH": f"{base}:{ROOT}"}
    env.pop("PDVERIFY_HYPOTHESIS_LOCAL_CONSTANTS", None)
    if hypothesis_rule:
        env["PDVERIFY_HYPOTHESIS_LOCAL_CONSTANTS"] = "1"
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "layout_release:target", "--profile", "ci",
           "--device", "cpu", "-k", "p5_ or p6_", "--report", str(report)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return {p["id"]: (p["status"], p["examples"], p["inputs"]) for p in json.loads(report.read_text())["properties"]}


def test_site_packages_and_pythonpath_layouts_draw_the_same_inputs(tmp_path: Path) -> None:
    site, path = _run(tmp_path / "pinned", "site"), _run(tmp_path / "pinned", "path")
    assert site == path and set(site) == {"P5", "P6"}
    assert all(inputs for _, _, inputs in site.values())
    # the control: under Hypothesis's own rule the PYTHONPATH layout's constants change what is drawn
    site_raw, path_raw = (
        _run(tmp_path / "raw", "site", hypothesis_rule=True),
        _run(tmp_path / "raw", "path", hypothesis_rule=True),
    )
    assert site_raw != path_raw, "the stand-in's constants did not reach generation: this test shows nothing"


def test_only_pdverifys_own_modules_are_local(tmp_path: Path) -> None:
    assert pin_local_constants()
    from hypothesis.internal.conjecture import providers

    assert getattr(providers, "is_local_module_file") is suite_module_file  # noqa: B009
    assert suite_module_file(str(ROOT / "pdverify" / "model" / "exchange.py"))
    assert suite_module_file(str(ROOT / "strategies" / "layouts.py"))
    assert suite_module_file(str(ROOT / "pdverify" / "strategies" / "layouts.py"))
    assert not suite_module_file(str(ROOT / "pdverify" / "properties" / "test_prebuilt.py"))
    assert not suite_module_file(str(ROOT / "pdverify" / "cli" / "check.py"))  # imported by a serial run only
    assert not suite_module_file(str(tmp_path / "sglang" / "srt" / "disaggregation" / "decode.py"))
