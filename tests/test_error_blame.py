"""An error is blamed where it arose: in the target (naming the unit and the function that raised) or, when its
frames never left the suite's own code, in the property - never a pass either way."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from pdverify.cli import exitcodes
from pdverify.plugin import raised_in
from tests import user_targets
from tests.test_cli import check

SUITE = "/site/pdverify/properties/test_fake.py"
PORT = "/site/pdverify/production/fake_port.py"
SGLANG = "/site/sglang/srt/disaggregation/fake.py"


def _caught(source: str, filename: str, **env: Any) -> BaseException:
    namespace: dict[str, Any] = dict(env)
    exec(compile(source, filename, "exec"), namespace)
    runner = "def run():\n    try:\n        body()\n    except Exception as exc:\n        return exc\n"
    exec(compile(runner, SUITE, "exec"), namespace)
    exc = namespace["run"]()
    assert isinstance(exc, BaseException)
    return exc


def test_an_error_in_the_property_body_is_the_propertys() -> None:
    exc = _caught("def body():\n    raise TypeError('replace() got multiple values')\n", SUITE)
    message = raised_in(exc, ("prefill_exchange",))
    assert message.startswith("error in the property, not the target"), message
    assert "raised in body" in message and "TypeError: replace() got multiple values" in message


def test_an_error_inside_the_target_names_the_unit_and_the_function() -> None:
    unit: dict[str, Any] = {}
    exec(compile("def unit():\n    raise ValueError('bad page')\n", PORT, "exec"), unit)
    exc = _caught("def body():\n    unit()\n", SUITE, unit=unit["unit"])
    message = raised_in(exc, ("prefill_exchange",))
    assert message.startswith("target error in unit prefill_exchange; raised in unit (" + PORT), message


def test_an_error_in_sglang_names_sglangs_function() -> None:
    sg: dict[str, Any] = {}
    exec(compile("def pop_preallocated():\n    raise AttributeError('no clear')\n", SGLANG, "exec"), sg)
    exc = _caught("def body():\n    pop_preallocated()\n", SUITE, pop_preallocated=sg["pop_preallocated"])
    message = raised_in(exc, ("decode_queue",))
    assert "raised in pop_preallocated (sglang/srt/disaggregation/fake.py:2)" in message, message


def test_an_assert_of_the_target_is_a_target_error_naming_file_and_line(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:asserting", "-k", "p6_")
    p6 = report["properties"][0]
    assert code == exitcodes.FAILED and p6["status"] == "error", p6
    source = inspect.getsource(user_targets).splitlines()
    line = next(i for i, text in enumerate(source, 1) if "assert length <=" in text)
    assert p6["message"].startswith("target error in unit page_align_floor; raised in _asserts_on_long ("), p6
    assert f"tests/user_targets.py:{line}): AssertionError: page_align_floor: length 21 past the table" in p6["message"]


def test_a_property_assertion_stays_a_failure(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:faulty", "-k", "p6_")
    assert code == exitcodes.FAILED and report["properties"][0]["status"] == "failed"


def test_an_exception_group_is_reported_as_its_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:two_faults", "-k", "p6_")
    p6 = report["properties"][0]
    out = capsys.readouterr().out
    assert code == exitcodes.FAILED and p6["status"] == "failed"
    assert p6["message"].startswith("2 distinct failures; first: "), p6["message"]
    assert "+---" not in p6["message"] and "+---" not in out
    assert sorted(f["status"] for f in p6["failures"]) == ["error", "failed"], p6["failures"]
    assert all("test_p6_align_floor(" in f["counterexample"] for f in p6["failures"])
    assert "ValueError: page_align_floor: cannot floor" in p6["failures"][0]["message"] + p6["failures"][1]["message"]
    assert "failure 1 of 2" in out and "failure 2 of 2" in out
