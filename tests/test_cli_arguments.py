"""Every argument is validated before anything heavy is imported: a bad command line is one line naming the
argument and the contract, a non-zero exit, and no torch (so it answers at once, not after seconds of imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pdverify.cli.selection import BUILTIN_TARGETS, matches, property_tests
from pdverify.runner import load_properties
from pdverify.targets import BUILTIN

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
from pdverify.cli.main import main
code = main(sys.argv[1:])
print("torch imported" if "torch" in sys.modules else "torch not imported")
raise SystemExit(code)
"""


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["bench", "--targets", "legacy,nosuch"], 2, "--targets: unknown target(s) 'nosuch'"),
        (["check", "--timeout", "-3"], 2, "argument --timeout: -3 must be >= 0"),
        (["check", "-k", "nosuch"], 2, "-k 'nosuch' selects no property"),
        (["check", "-k", "p1_ and"], 2, "-k 'p1_ and' is not a valid expression"),
        (["check", "--target", "nosuch"], 3, "--target: unknown target 'nosuch'"),
        (["check", "-n", "-1"], 2, "argument -n/--jobs: -1 must be >= 0"),
        (["fuzz", "--minutes", "0"], 2, "argument --minutes: 0 must be > 0"),
        (["fuzz", "--target", "x:"], 3, "--target: unknown target 'x:'"),
        (["mutate", "--jobs", "0"], 2, "argument --jobs: 0 must be >= 1"),
        (["bench", "--repeats", "zero"], 2, "argument --repeats: 'zero' is not an integer"),
    ],
)
def test_bad_arguments_fail_fast_and_name_the_argument(tmp_path: Path, argv: list[str], code: int, says: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert says in done.stderr, done.stderr
    if "error: argument" not in done.stderr:  # argparse's own errors exit inside parse_args, before the probe prints
        assert "torch not imported" in done.stdout


def test_a_named_bench_target_that_cannot_load_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from pdverify.cli.main import main

    assert main(["bench", "--targets", "pdverify,tests.user_targets:nothing_here", "--quick"]) == 3
    assert "--targets: tests.user_targets:nothing_here" in capsys.readouterr().out


def test_the_static_property_list_is_the_registry() -> None:
    declared = {(p.id, p.test) for p in property_tests()}
    assert declared == {(info.id, info.name) for info in load_properties().values()}
    assert set(BUILTIN_TARGETS) == set(BUILTIN)


@pytest.mark.parametrize(
    ("keyword", "ids"),
    [("p1_ or s16", {"P1", "S16"}), ("test_prebuilt.py and p19", {"P19"}), ("d1 and not cuda", {"D1"})],
)
def test_the_static_selection_is_pytests(keyword: str, ids: set[str]) -> None:
    got = matches(keyword)
    assert got is not None and {p.id for p in got} == ids
