"""``pdverify coverage``: two labelled runs combined into HTML, Cobertura XML and a per-function summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdverify.cli import exitcodes
from pdverify.cli.main import main

SCRIPT = """
import torch
from pdverify.production import page_index
page_index.kv_to_page_indices(torch.arange(8), {ps})
page_index.page_align_floor(9, {ps})
"""


def _labelled_run(tmp_path: Path, label: str, ps: int) -> Path:
    script = tmp_path / f"{label}.py"
    script.write_text(SCRIPT.format(ps=ps))
    data = tmp_path / f".coverage.{label}"
    cmd = [sys.executable, "-m", "coverage", "run", "--branch", f"--context={label}", f"--data-file={data}",
           "--source=pdverify.production", str(script)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return data


def test_combined_report_from_two_labelled_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_labelled_run(tmp_path, "cpu", 4), _labelled_run(tmp_path, "ci", 1)]
    out = tmp_path / "out"
    args = ["coverage", "--data", str(tmp_path / ".coverage.all"), "--combine", *map(str, runs), "--out", str(out)]
    code = main([*args, "--functions", "pdverify.production.page_index:kv_to_page_indices",
                 "pdverify.production.page_index:page_align_floor"])  # fmt: skip
    assert code == exitcodes.OK
    summary = (out / "summary.md").read_text()
    assert "| `pdverify.production.page_index:kv_to_page_indices` | 1/1 (100%) | 0/0 (100%) | ci, cpu |" in summary
    assert (out / "html" / "index.html").exists() and "<coverage" in (out / "coverage.xml").read_text()
    assert summary in capsys.readouterr().out


def test_unmeasured_function_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _labelled_run(tmp_path, "cpu", 4)
    code = main(["coverage", "--data", str(data), "--out", str(tmp_path / "o"), "--functions", "pdverify", "sglang"])
    assert code == 1
    text = capsys.readouterr().out
    assert "| `pdverify.production.fast:prepare_for_prebuilt` | 0/53 (0%)" in text
    assert "not measured (not imported or outside --source): sglang.srt" in text


def test_coverage_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coverage", "--data", str(tmp_path / "none")]) == exitcodes.USAGE
    assert main(["coverage", "--data", str(tmp_path / "none"), "--functions", "bogus"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "no coverage data" in err and "unknown function set 'bogus'" in err


UNREACHED_MODULE = """
def admit(n, npu):
    if npu:
        return -1
    if n > 8:
        return 8
    return n
"""


def test_branches_not_taken_are_explained_or_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pdverify.cli.coverage import (
        NOT_DRIVEN,
        UNEXPLAINED,
        UNREACHABLE,
        FunctionCoverage,
        load_unreached,
        markdown,
        stale_entries,
        unreached_branches,
    )

    (tmp_path / "covmod_unreached.py").write_text(UNREACHED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = str(tmp_path / "covmod_unreached.py")
    region = {"missing_branches": [[3, 4], [5, 6], [5, 7]]}
    report = {"files": {path: {"functions": {"admit": region}}}}
    entries_file = tmp_path / "u.json"
    entries_file.write_text(json.dumps({"entries": [
        {"function": "admit", "branch": "if npu", "kind": UNREACHABLE, "reason": "NPU only"},
        {"function": "admit", "branch": "if n > 8", "line": 5, "kind": NOT_DRIVEN, "reason": "big batches"},
    ]}))  # fmt: skip
    got = unreached_branches(report, ["covmod_unreached:admit"], load_unreached(entries_file))
    assert [(u.line, u.target, u.kind) for u in got] == [(3, 4, UNREACHABLE), (5, 6, NOT_DRIVEN), (5, 7, NOT_DRIVEN)]
    row = FunctionCoverage("covmod_unreached:admit", 6, 4, 4, 1, unreachable=1)
    text = markdown([row], "t", got)
    assert "| 1/4 (25%) | 1/3 (33%) |" in text and "NPU only" in text and "0 unexplained" in text
    assert stale_entries(got, load_unreached(entries_file)) == []
    # the NPU branch is taken now: its explanation is stale
    region["missing_branches"].remove([3, 4])
    now = unreached_branches(report, ["covmod_unreached:admit"], load_unreached(entries_file))
    assert [e["branch"] for e in stale_entries(now, load_unreached(entries_file))] == ["if npu"]
    region["missing_branches"].append([2, 9])
    last = unreached_branches(report, ["covmod_unreached:admit"], load_unreached(entries_file))[-1]
    assert last.kind == UNEXPLAINED and last.source == "def admit(n, npu):"
    entries_file.write_text(json.dumps({"entries": [{"function": "admit", "branch": "x", "kind": "maybe"}]}))
    with pytest.raises(ValueError, match="entry 0 needs function, branch, reason"):
        load_unreached(entries_file)


@pytest.mark.parametrize(
    ("kind", "counted"),
    [("refused by the server", ("1 refused by the server", "0 taken only by an argument no caller")),
     ("no caller", ("0 refused by the server", "1 taken only by an argument no caller"))],
)  # fmt: skip
def test_a_branch_out_of_reach_is_out_of_the_reachable_total(
    tmp_path: Path, kind: str, counted: tuple[str, str]
) -> None:
    """A branch only a refused configuration takes, or only an argument no caller in the release passes, is counted
    out of the reachable total, under its own kind."""
    from pdverify.cli.coverage import OUT_OF_REACH, FunctionCoverage, Unreached, load_unreached, markdown

    assert kind in OUT_OF_REACH
    entries_file = tmp_path / "u.json"
    entries_file.write_text(json.dumps({"entries": [
        {"function": "admit", "branch": "if host", "kind": kind, "reason": "why"},
    ]}))  # fmt: skip
    assert load_unreached(entries_file)[0]["kind"] == kind
    got = [Unreached("covmod:admit", 3, 4, "if host:", kind, "why")]
    text = markdown([FunctionCoverage("covmod:admit", 6, 4, 4, 1, unreachable=1)], "t", got)
    assert "| 1/3 (33%) |" in text and all(c in text for c in counted) and "0 unexplained" in text, text
