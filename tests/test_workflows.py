"""The CI workflows are valid GitHub Actions workflows, and the CPU job runs exactly the README's commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / "ci" / "workflows").glob("*.yml"))


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart\n\n```bash\n(.*?)```", text, re.S)
    assert block, "README has no Quickstart bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_workflows_validate_against_the_github_schema() -> None:
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    names = {w.stem for w in WORKFLOWS}
    assert names == {"campaign", "conformance", "cpu", "fuzz", "gpu", "matrix", "nightly"}, names
    result = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cpu_job_runs_the_readme_commands() -> None:
    install, test = readme_commands()
    cpu = (ROOT / "ci" / "workflows" / "cpu.yml").read_text()
    runs = [m.strip() for m in re.findall(r"^\s+run: (.+)$", cpu, re.M)]
    assert install in runs and test in runs


def test_ci_run_calls_the_readme_test_command() -> None:
    _, test = readme_commands()
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert any(line == test or line.startswith(test + " ") for line in lines), f"{test!r} not in .ci/run"


def test_ledger_crosscheck_says_it_needs_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from pdverify.ledger import crosscheck

    if torch.cuda.is_available():
        pytest.skip("CUDA present: ci/gpu.sh runs the cross-check")
    assert crosscheck.main() == 3
    assert "needs CUDA" in capsys.readouterr().out


def test_example_database_choices(tmp_path: Path) -> None:
    from hypothesis.database import DirectoryBasedExampleDatabase, MultiplexedDatabase

    from pdverify.profiles import example_database

    assert isinstance(example_database({"PDVERIFY_DB_DIR": str(tmp_path)}), DirectoryBasedExampleDatabase)
    shared = example_database({"PDVERIFY_DB_DIR": str(tmp_path), "PDVERIFY_GITHUB_DB": "me/repo"})
    assert isinstance(shared, MultiplexedDatabase)
    with pytest.raises(ValueError, match="owner/repo"):
        example_database({"PDVERIFY_GITHUB_DB": "norepo"})
