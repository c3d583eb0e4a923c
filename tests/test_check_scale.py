"""``pdverify check -n N``, the output a person reads, ``pdverify list``, and profiles applied at run time."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pdverify.cli import exitcodes
from pdverify.cli.main import main
from pdverify.cli.render import Progress, fold_absent_devices, render_list, render_table, use_colour
from pdverify.cli.report import PropertyResult, without_timings
from pdverify.runner import load_properties

KEYS = "p3_ or p6_ or p12 or b3 or p19 or p22_"


def run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "r.json"
    code = main(["check", "--device", "cpu", "--profile", "ci", "--report", str(report), *args])
    return code, json.loads(report.read_text())


def test_parallel_check_reports_what_a_serial_one_does(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "p").mkdir()
    serial = run(tmp_path / "s", "--target", "legacy", "-k", KEYS)
    parallel = run(tmp_path / "p", "--target", "legacy", "-k", KEYS, "-n", "2")
    assert serial[0] == parallel[0] == exitcodes.FAILED
    assert without_timings(serial[1]) == without_timings(parallel[1])
    got = {p["id"]: p["status"] for p in parallel[1]["properties"]}
    assert got == {"P3": "failed", "P6": "passed", "P12": "passed", "B3": "failed", "P19": "passed",
                   "P22": "failed"}  # fmt: skip


def test_parallel_check_exports_regressions(tmp_path: Path) -> None:
    code, _ = run(tmp_path, "--target", "legacy", "-k", "p22_", "-n", "2", "--export-regressions", str(tmp_path / "x"))
    assert code == exitcodes.FAILED
    (exported,) = (tmp_path / "x").glob("test_regression_p22_*.py")
    assert "batch=PrebuiltBatch(" in exported.read_text()


def test_parallel_check_of_a_passing_target(tmp_path: Path) -> None:
    code, report = run(tmp_path, "-k", "p5_ or p19", "-n", "2")
    assert code == exitcodes.OK and report["summary"] == {"passed": 2}


def test_negative_jobs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "-n", "-1"])
    assert exit_info.value.code == exitcodes.USAGE
    assert "-n/--jobs: -1 must be >= 0" in capsys.readouterr().err


def _result(pid: str, title: str, device: str, status: str, message: str = "") -> PropertyResult:
    return PropertyResult(pid, title, f"test_{pid.lower()}", device, status, 10, 0.5, message)


LONG = "out_cache_loc: the rows' [prefix, prefix+extend) slices concatenated in batch order, int64 on the device"


def test_titles_wrap_at_words_and_absent_devices_fold() -> None:
    absent = "CUDA not available: torch.cuda.is_available() is False"
    rows = [
        _result("P19", LONG, "cpu", "passed"),
        _result("P19", LONG, "cuda", "skipped", absent),
        _result("P20", "counts", "cpu", "failed"),
        _result("P20", "counts", "cuda", "skipped", absent),
    ]
    text = render_table(rows, colour=False, width=120)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("P19"))
    assert lines[first].split()[-5] == "slices" and lines[first + 1].split()[0] == "concatenated", text
    assert lines[first + 1].startswith(" "), "a wrapped title continues under its column"
    for word in LONG.split():
        assert any(word in line.split() for line in text.splitlines()), f"{word!r} was cut:\n{text}"
    assert "\x1b[" not in text
    assert "cuda" not in [line.split()[2] for line in text.splitlines() if len(line.split()) > 2 and line[0] == "P"]
    assert text.splitlines()[-1] == f"cuda: 2 properties skipped ({absent})"
    kept, folded = fold_absent_devices(rows)
    assert [r.device for r in kept] == ["cpu", "cpu"] and len(folded) == 1


def test_a_device_with_one_real_result_is_not_folded() -> None:
    rows = [_result("P1", "t", "cuda", "skipped", "CUDA not available"), _result("P2", "t", "cuda", "passed")]
    kept, folded = fold_absent_devices(rows)
    assert len(kept) == 2 and folded == []


def test_colour_on_a_terminal_only_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stream(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Stream(True)) and not use_colour(Stream(False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Stream(True))
    coloured = render_table([_result("P1", "t", "cpu", "failed")], colour=True)
    assert "\x1b[" in coloured and "failed" in coloured


def test_progress_is_silent_off_a_terminal() -> None:
    with open(os.devnull, "w") as sink:
        progress = Progress(stream=sink, total=3)
        assert not progress.active
        with progress:
            progress.start("test_p19")
            progress.example(5)
            progress.finish()
        line = progress.line()
        assert line.startswith("pdverify check: 1/3 done  running test_p19: 5 examples  ETA 0:"), line
        progress._started -= 60  # one property took a minute: two more to go
        assert progress.eta() == "  ETA 2:00"


def test_progress_line_on_a_terminal(tmp_path: Path) -> None:
    """Run ``pdverify check`` under a pseudo-terminal (``script``) and look for the progress line."""
    script = subprocess.run(["which", "script"], capture_output=True, text=True).stdout.strip()
    if not script:
        pytest.skip("util-linux script(1) not installed")
    cmd = f"{sys.executable} -m pdverify.cli.main check --device cpu --profile ci -k 'p19 or p20' --report ''"
    out = subprocess.run(
        [script, "-qec", cmd, "/dev/null"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_COLOR": "", "TERM": "xterm"},
    ).stdout  # fmt: skip
    assert "running test_p" in out and " examples" in out, out[-2000:]
    assert "\x1b[" in out  # coloured statuses on a terminal


def test_list_names_every_property(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == exitcodes.OK
    out = capsys.readouterr().out
    for pid in load_properties():
        assert any(line.split()[:1] == [pid] for line in out.splitlines()), pid
    assert "#35070" in out and "prepare_for_prebuilt" in out
    text = render_list(list(load_properties().values()), colour=False, width=160)
    assert "-k test_p19_out_cache_loc" in text and "test_prebuilt.py" in text
    assert "every release that has the units" in text


def test_the_chosen_profile_runs_whatever_was_imported_first(tmp_path: Path) -> None:
    """The property modules are imported (under this session's profile) before the check loads thorough."""
    load_properties()
    code, report = run(tmp_path, "-k", "p5_")
    assert code == exitcodes.OK
    assert report["properties"][0]["examples"] >= 100
    report_path = tmp_path / "t.json"
    assert main(["check", "--device", "cpu", "--profile", "thorough", "-k", "p5_", "--report", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["properties"][0]["examples"] >= 1000


def test_plain_table_without_rich_wraps_and_folds() -> None:
    from pdverify.cli.render import _plain_table

    rows = [_result("P19", LONG, "cpu", "passed"), _result("P20", "counts", "cpu", "failed")]
    text = _plain_table(rows, ["cuda: 2 properties skipped (CUDA not available)"])
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["property", "title"]
    assert any(line.strip().startswith("concatenated") or "concatenated" in line.split() for line in lines[1:3])
    for word in LONG.split():
        assert any(word in line.split() for line in lines), word
    assert lines[-1] == "cuda: 2 properties skipped (CUDA not available)"


def test_progress_draws_on_a_terminal_stream() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    progress = Progress(stream=stream, total=2)
    assert progress.active
    with progress:
        progress.start("test_p19")
        for n in range(1, 50):
            progress.example(n)
        progress.finish()
    assert "running test_p19" in stream.getvalue()


def test_long_lists_fold_numpy_style_in_the_terminal() -> None:
    from pdverify.cli.render import compact

    text = (
        "Falsifying example: test_b3(\n    batch=Batch(\n        ids=[\n"
        + "".join(f"            {i},\n" for i in range(300))
        + "        ],\n    ),\n)"
    )
    folded = compact(text)
    assert "            0, 1, 2, ..., 297, 298, 299,  # 300 items" in folded
    assert len(folded.splitlines()) == 7 and compact("x=[\n    1,\n    2,\n]") == "x=[\n    1,\n    2,\n]"


def test_rows_come_in_natural_id_order_and_fit_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdverify.cli.check import _id_order
    from pdverify.cli.render import id_order, terminal_width

    ids = ["P10", "P2", "B1", "P18p", "P18", "S9", "upstream", "D1"]
    rows = [_result(i, "a long title " * 8, "cpu", "passed") for i in ids]
    assert [r.id for r in sorted(rows, key=_id_order)] == ["B1", "D1", "P2", "P10", "P18", "P18p", "S9", "upstream"]
    assert id_order("P18") < id_order("P18p") < id_order("P19")
    monkeypatch.setenv("COLUMNS", "80")
    assert terminal_width() == 80
    text = render_table(rows, colour=False)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "a long title a long" in text  # wrapped, not cut
