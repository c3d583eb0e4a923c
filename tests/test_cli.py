"""``pdverify check`` end to end: exit codes, the table, the report, isolation, regression export."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pdverify.cli import exitcodes
from pdverify.cli.main import main
from pdverify.cli.report import SCHEMA_PATH, without_timings
from tests.stand_in import run_check_on_stand_in


def check(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    code = main(["check", "--device", "cpu", "--profile", "ci", "--report", str(report), *args])
    data = json.loads(report.read_text()) if report.exists() else {}
    if data:
        jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return code, data


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {p["id"]: p["status"] for p in report["properties"]}


def test_pdverify_target_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check(tmp_path, "-k", "p1_ or p19 or p9_ or b1")
    assert code == exitcodes.OK
    assert set(statuses(report).values()) == {"passed"} and len(report["properties"]) == 4
    assert report["target"]["name"] == "pdverify" and report["seed"] == "derandomized"
    assert all(p["examples"] > 1 for p in report["properties"])
    assert re.search(r"^P19 +out_cache_loc", capsys.readouterr().out, re.M)


def test_legacy_fails_naming_properties(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check(tmp_path, "--target", "legacy", "-k", "p3_ or p22 or b1 or p5_")
    out = capsys.readouterr().out
    assert code == exitcodes.FAILED
    assert statuses(report) == {"P3": "failed", "P22": "failed", "P22b": "failed", "B1": "failed", "P5": "passed"}
    for pid in ("P3", "P22", "B1"):
        assert f"[failed] {pid} " in out
    assert "64 tokens at page_size 16: expected one D2H copy of 4 elements" in out
    b1 = next(p for p in report["properties"] if p["id"] == "B1")
    assert b1["reproduce"].startswith("pdverify check --target legacy --profile ci") and b1["counterexample"]


def test_user_target_with_injected_fault_is_caught(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:faulty", "-k", "p6_ or p5_")
    assert code == exitcodes.FAILED
    assert statuses(report) == {"P5": "passed", "P6": "failed"}
    p6 = next(p for p in report["properties"] if p["id"] == "P6")
    assert "test_p6_align_floor(" in p6["counterexample"] and "page_align_floor" in p6["message"]


def test_misbehaving_target_is_isolated(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--timeout", "1", "--target", "tests.user_targets:misbehaving",
                         "-k", "p1_ or p4_ or p5_ or p6_ or p19")  # fmt: skip
    assert code == exitcodes.FAILED
    got = statuses(report)
    assert got == {"P1": "failed", "P4": "error", "P5": "skipped (CUDA OOM)", "P6": "timeout", "P19": "passed"}
    by_id = {p["id"]: p for p in report["properties"]}
    assert "exploded" in by_id["P4"]["message"] and "per-example limit" in by_id["P6"]["message"]
    p4 = by_id["P4"]["message"]
    assert re.match(r"target error in unit suffix_page_indices; raised in _raises \(.*user_targets\.py:\d+\): "
                    r"RuntimeError: device kernel exploded", p4), p4  # fmt: skip
    assert "expected a host numpy array, got list" in by_id["P1"]["message"]


STAND_IN_SGLANG = """
def kv_to_page_indices(kv_indices, page_size):
    return (kv_indices[::page_size] // page_size).cpu().numpy() if page_size > 1 else kv_indices.scheduler.page_size
"""

STAND_IN_TARGET = """
from pdverify.targets import load_target
from sglang.srt.mem_cache import common
target = load_target("pdverify").derive("stand-in", kv_to_page_indices=common.kv_to_page_indices)
"""


def test_a_unit_raising_inside_sglang_is_a_target_error_naming_unit_and_function(tmp_path: Path) -> None:
    """A stand-in that lacks what the real function reads (here: a tensor has no ``scheduler``) is reported as a
    target error naming the unit and the SGLang function and line; the run goes on; never a pass."""
    proc, report = run_check_on_stand_in(tmp_path, STAND_IN_SGLANG, STAND_IN_TARGET, "-k", "p1_ or p5_")
    assert proc.returncode == exitcodes.FAILED, proc.stdout + proc.stderr
    got = {p["id"]: p for p in json.loads(report.read_text())["properties"]}
    assert got["P1"]["status"] == "error" and got["P5"]["status"] == "passed"
    assert got["P1"]["message"].startswith(
        "target error in unit kv_to_page_indices; raised in kv_to_page_indices (sglang/srt/mem_cache/common.py:3): "
        "AttributeError"
    ), got["P1"]["message"]


def test_subset_target_reports_not_applicable(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:page_only", "-k", "p1_ or p5_ or p19")
    assert code == exitcodes.OK
    assert statuses(report) == {"P1": "passed", "P5": "not applicable", "P19": "not applicable"}


def test_nothing_applicable_is_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = check(tmp_path, "--target", "tests.user_targets:page_only", "-k", "p5_")
    assert code == exitcodes.FAILED
    assert "no property ran" in capsys.readouterr().out


def test_two_ci_runs_give_the_same_report(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, first = check(tmp_path / "a", "--target", "legacy", "-k", "p3_ or p12 or b3")
    _, second = check(tmp_path / "b", "--target", "legacy", "-k", "p3_ or p12 or b3")
    assert without_timings(first) == without_timings(second)


def test_exported_regression_fails_then_passes(tmp_path: Path) -> None:
    module = tmp_path / "my_target.py"
    module.write_text(
        "from pdverify.targets import load_target\n"
        "def floor(n, ps):\n"
        "    return (n // ps) * ps - (ps if n and n % ps == 0 else 0)\n"
        "target = load_target('pdverify').derive('mine', page_align_floor=floor)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        code, _ = check(
            tmp_path, "--target", "my_target:target", "-k", "p6_", "--export-regressions", str(tmp_path / "reg")
        )
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_target", None)
    assert code == exitcodes.FAILED
    (exported,) = (tmp_path / "reg").glob("test_regression_*.py")
    text = exported.read_text()
    assert "from hypothesis" not in text and "import hypothesis" not in text and "@given" not in text

    def replay() -> int:
        env_path = f"{tmp_path}:{Path.cwd()}"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(exported)]
        return subprocess.run(
            cmd, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, capture_output=True
        ).returncode

    assert replay() == 1, "the exported regression must fail while the fault is there"
    module.write_text(module.read_text().replace(" - (ps if n and n % ps == 0 else 0)", ""))
    assert replay() == 0, "the exported regression must pass once the fault is fixed"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["check", "--bogus"], exitcodes.USAGE, "unrecognized arguments: --bogus"),
        (["check", "--profile", "nope"], exitcodes.USAGE, "invalid choice: 'nope'"),
        (["check", "--device", "tpu"], exitcodes.USAGE, "invalid choice: 'tpu'"),
        (["frobnicate"], exitcodes.USAGE, "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_command_lines(argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == code and message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nosuch", "unknown target 'nosuch'"),
        ("mutant:ZZ99", "no mutant 'ZZ99'"),
        ("tests.nosuchmodule:x", "cannot import module 'tests.nosuchmodule'"),
        ("tests.user_targets:missing", "has no attribute 'missing'"),
        ("tests.user_targets:not_a_target", "is a int, not a pdverify Target"),
    ],
)
def test_unloadable_targets(tmp_path: Path, target: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", target, "--report", str(tmp_path / "r.json")]) == exitcodes.TARGET
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and target in err


def test_unwritable_export_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["check", "--export-regressions", str(blocker / "sub")]) == exitcodes.OUTPUT
    assert "cannot write to directory" in capsys.readouterr().err


def test_cuda_requested_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert main(["check", "--device", "cuda"]) == exitcodes.USAGE
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


@pytest.mark.parametrize("profile", ["dev", "mutate", "thorough"])
def test_every_profile_loads(tmp_path: Path, profile: str) -> None:
    report = tmp_path / "r.json"
    assert main(["check", "--device", "cpu", "--profile", profile, "-k", "p5_", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["profile"] == profile


def test_the_shrink_profile_records_the_smallest_generated_input(tmp_path: Path) -> None:
    """``shrink``: generated examples only (the explicit ones skipped), the first failure shrunk - here XV07's
    digest at the Mamba slot, shrunk to one token on one page."""
    report = tmp_path / "r.json"
    argv = ["check", "--target", "mutant:XV07", "--device", "cpu", "--profile", "shrink", "--seed", "1", "-k", "x2",
            "--report", str(report)]  # fmt: skip
    assert main(argv) == exitcodes.FAILED
    (x2,) = json.loads(report.read_text())["properties"]
    text = x2["counterexample"]
    assert "explicit" not in text and "prompt=1," in text and "kv_pool='mamba_dsa'" in text, text
    assert "'s digest read dsa items [" in x2["message"], x2["message"]


def test_unreproducible_failure_is_flaky_never_passed(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:flaky", "-k", "p6_")
    assert code == exitcodes.FAILED
    assert statuses(report) == {"P6": "flaky"}


def test_a_configuration_the_server_refuses_is_discarded_and_counted(tmp_path: Path) -> None:
    """``ServerRefuses`` from a unit: the example is outside the release's domain - neither a pass nor a failure -
    and the report counts it; a server that refuses everything leaves the property without examples, never
    passed."""
    code, report = check(tmp_path, "--target", "tests.user_targets:refusing_host_receive", "-k", "test_q1_")
    q1 = report["properties"][0]
    assert code == exitcodes.OK and q1["status"] == "passed", q1
    assert 0 < q1["refused"] < q1["examples"], q1
    code, report = check(tmp_path, "--target", "tests.user_targets:refusing_everything", "-k", "test_q1_")
    q1 = report["properties"][0]
    assert code != exitcodes.OK and q1["status"] == "no examples" and "refuses to start" in q1["message"], q1
    assert q1["refused"] == q1["examples"] > 0, q1


@pytest.mark.parametrize("name", ["refusing_greedy", "refusing_bias"])
def test_a_refusal_from_the_scheduler_setup_or_the_request_class_is_discarded_too(tmp_path: Path, name: str) -> None:
    """``ServerRefuses`` raised where the target builds what a unit's call runs in - its request objects
    (``request_factory``), its scheduler's setup (``scheduler_scope``) - discards the example as a unit's does."""
    code, report = check(tmp_path, "--target", f"tests.user_targets:{name}", "-k", "test_p27_")
    p27 = report["properties"][0]
    assert code == exitcodes.OK and p27["status"] == "passed", p27
    assert 0 < p27["refused"] < p27["examples"], p27


def test_run_property_discards_refused_configurations_too() -> None:
    """The programmatic runner (``pdverify.runner.run_property``: ``mutate``, user scripts) treats a refused
    configuration as ``pdverify check`` does: discarded, and a property whose every example is refused has no
    examples, never passed."""
    from pdverify.runner import load_properties, run_property
    from tests import user_targets

    q1 = load_properties()["Q1"]
    got = run_property(q1, user_targets.refusing_host_receive)
    assert got.status == "passed" and got.examples > 0, got
    got = run_property(q1, user_targets.refusing_everything)
    assert got.status == "no examples" and "refuses to start with" in got.message, got


def test_examples_outside_the_release_domain_are_counted_apart(tmp_path: Path) -> None:
    """An example that uses a later release's feature is discarded on an earlier release (``within_release``): the
    report counts it (``outside``) so that "114 examples" never hides how many were verdicts."""
    code, report = check(tmp_path, "--target", "tests.user_targets:old_release", "-k", "test_s9_")
    s9 = report["properties"][0]
    assert code == exitcodes.OK and s9["status"] == "passed", s9
    assert 0 < s9["outside"] < s9["examples"] and s9["refused"] == 0, s9
    code, report = check(tmp_path, "--target", "pdverify", "-k", "test_s9_")
    assert report["properties"][0]["outside"] == 0  # no release: every input is in the domain


def test_the_table_names_each_kind_of_discarded_example() -> None:
    from pdverify.cli.render import _examples
    from pdverify.cli.report import PropertyResult
    from pdverify.properties.registry import discarded_message

    r = PropertyResult("Q1", "t", "test_q1", "cpu", "passed", 145, 0.1, outside=8, refused=32)
    assert _examples(r) == "145 (8 outside the release's domain, 32 refused by the server)"
    assert _examples(PropertyResult("Q1", "t", "test_q1", "cpu", "passed", 145, 0.1)) == "145"
    assert discarded_message(40, 8, 32, "no host receive") == (
        "every one of 40 examples was discarded (8 outside the release's input domain; 32 a configuration the "
        "server refuses to start with: no host receive)"
    )
