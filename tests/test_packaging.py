"""Installing pdverify puts one package in site-packages: ``pdverify`` (its strategies as ``pdverify.strategies``),
never a top-level ``strategies`` that would collide with a user's package of that name."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_only_pdverify(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(ROOT), "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path)], capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("pdverify-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"pdverify"}, tops
    ours = {p.relative_to(ROOT / "strategies").as_posix() for p in (ROOT / "strategies").glob("*.py")}
    assert {f"pdverify/strategies/{n}" for n in ours} <= set(names)
    assert "pdverify/strategies/py.typed" in names


def test_the_suite_imports_strategies_only_through_pdverify() -> None:
    import pdverify.strategies

    assert Path(pdverify.strategies.__file__).resolve() == (ROOT / "strategies" / "__init__.py").resolve()
    done = subprocess.run(["git", "grep", "-nE", r"^\s*(from|import) strategies\b", "--", "*.py"], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.stdout == "", (
        f"imports of the bare `strategies` name (two copies of the field registry):\n{done.stdout}"
    )
