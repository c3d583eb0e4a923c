"""Every finding's folder holds what an upstream maintainer needs, and its reproducer and regression test stand alone.

Issue 21 asks each ``findings/<ID>/`` for ``repro.py``, ``fix.patch``, ``test_<id>.py`` and ``issue.md``; the
reproducer and the test must import only SGLang, torch, numpy and the standard library - never pdverify - so that
they run in SGLang's own tree. Whether they fail on the release and pass with the patch is ``ci/findings_patches.sh``'s
job (conformance environment); this checks what can be checked without SGLang.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

FINDINGS = Path(__file__).resolve().parent.parent / "findings"
FOLDERS = sorted((p for p in FINDINGS.iterdir() if p.is_dir()), key=lambda p: int(p.name[1:]))
ALLOWED = {"sglang", "torch", "numpy"} | set(sys.stdlib_module_names)


def _imported(path: Path) -> set[str]:
    """The top-level packages ``path`` imports (absolute imports; a relative one names no package and is refused)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module.split(".")[0] if node.module and node.level == 0 else f"relative import in {path}")
    return found


def test_there_are_finding_folders() -> None:
    assert [p.name for p in FOLDERS][:2] == ["F1", "F2"], FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_each_finding_folder_is_complete(folder: Path) -> None:
    wanted = ["repro.py", "fix.patch", f"test_{folder.name.lower()}.py", "issue.md", "README.md"]
    missing = [name for name in wanted if not (folder / name).is_file()]
    assert not missing, f"{folder.name} lacks {missing}"
    patch = (folder / "fix.patch").read_text()
    assert patch.startswith(("---", "diff ")) and "\n+++ " in patch and "\n@@ " in patch, f"{folder.name}/fix.patch"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_reproducer_and_regression_test_stand_alone(folder: Path) -> None:
    for name in ("repro.py", f"test_{folder.name.lower()}.py"):
        outside = sorted(_imported(folder / name) - ALLOWED)
        assert not outside, f"{folder.name}/{name} imports {outside}: only sglang, torch, numpy and the stdlib"


def test_the_import_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "repro.py"
    bad.write_text("import sys\nfrom pdverify.targets import sglang_decode\nfrom . import helper\nimport numpy as np\n")
    assert _imported(bad) - ALLOWED == {"pdverify", f"relative import in {bad}"}
