"""The interrupt handling in one process: a signal becomes a KeyboardInterrupt that remembers it, and pdverify check
interrupted inside a property (or while loading its target) reports, never passes."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from pdverify.cli import interrupt
from pdverify.cli.main import main


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_is_a_keyboard_interrupt_that_remembers_it(sig: signal.Signals, code: int) -> None:
    with pytest.raises(KeyboardInterrupt), interrupt.interruptible():
        os.kill(os.getpid(), sig)
        signal.pause()
    assert [sig] == interrupt.RECEIVED and interrupt.exit_code() == code and interrupt.describe() == sig.name
    interrupt.RECEIVED.clear()
    assert interrupt.exit_code() == 130  # a KeyboardInterrupt with no signal behind it counts as SIGINT


def test_interrupted_inside_a_property_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "interrupting_target.py").write_text(
        "import os, signal\nfrom pdverify.targets import load_target\n\n"
        "def floor(n, page_size):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return n\n\n"
        "target = load_target('pdverify').derive('interrupts', page_align_floor=floor)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    report = tmp_path / "r.json"
    code = main(["check", "--target", "interrupting_target:target", "--profile", "ci", "--device", "cpu", "-k",
                 "p5_ or p6_", "--report", str(report)])  # fmt: skip
    data = json.loads(report.read_text())
    assert code == 143 and data["status"] == "interrupted" and data["exit_code"] == 143
    assert {p["id"]: p["status"] for p in data["properties"]}["P6"] == "interrupted"


def test_interrupted_while_loading_the_target_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "interrupting_import.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    report = tmp_path / "r.json"
    assert main(["check", "--target", "interrupting_import:target", "--report", str(report)]) == 130
    assert json.loads(report.read_text())["status"] == "interrupted"
    sys.modules.pop("interrupting_import", None)
