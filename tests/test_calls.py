"""The call record behind the run report's ``calls``: which functions of the release a property called."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pdverify.cli import exitcodes
from pdverify.targets.calls import close_recording, open_recording, recording, undriven_units
from tests.stand_in import run_check_on_stand_in

RELEASE = """
import helper_outside

def _square(x):
    return x * x

class Pool:
    def take(self, n):
        return [_square(i) for i in range(n)]

def entry(n):
    helper_outside.note()
    return sum(Pool().take(n))
"""

LATE_IMPORT = """
def decorate(fn):
    return fn

@decorate
def imported_body():
    return 1
"""


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    pkg = tmp_path / "fakerel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(RELEASE)
    (pkg / "late.py").write_text(LATE_IMPORT)
    (tmp_path / "helper_outside.py").write_text("def note():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakerel", "fakerel.core", "fakerel.late", "helper_outside"):
        sys.modules.pop(name, None)
    import fakerel.core  # type: ignore[import-not-found]

    return fakerel.core


def test_records_the_release_functions_a_call_enters(release: object) -> None:
    entry = recording(release.entry, "fakerel")  # type: ignore[attr-defined]
    open_recording()
    assert entry(3) == 5
    # the package's functions and methods, not the list comprehension, not a module outside the package
    assert close_recording() == ["fakerel.core:Pool.take", "fakerel.core:_square", "fakerel.core:entry"]


def test_an_import_inside_the_call_is_not_a_call_of_the_release(release: object) -> None:
    def unit() -> int:
        import fakerel.late  # type: ignore[import-not-found]

        return int(fakerel.late.imported_body())

    wrapped = recording(unit, "fakerel")
    open_recording()
    assert wrapped() == 1
    # the module body and the decorator it applied ran under the import; only the call itself counts
    assert close_recording() == ["fakerel.late:imported_body"]


def test_nothing_is_recorded_or_hooked_outside_a_recording(release: object) -> None:
    seen: list[object] = []
    entry = recording(release.entry, "fakerel")  # type: ignore[attr-defined]
    assert close_recording() == []
    assert entry(2) == 1 and sys.getprofile() is None
    open_recording()

    def outer_hook(frame: object, event: str, arg: object) -> None:
        seen.append(event)

    sys.setprofile(outer_hook)
    try:
        entry(2)
        assert sys.getprofile() is outer_hook, "the hook in place before the call is restored after it"
    finally:
        sys.setprofile(None)
    assert close_recording() == ["fakerel.core:Pool.take", "fakerel.core:_square", "fakerel.core:entry"]


def test_a_raising_unit_restores_the_profile_and_keeps_what_it_called(release: object) -> None:
    def unit() -> None:
        release.entry(1)  # type: ignore[attr-defined]
        raise RuntimeError("boom")

    wrapped = recording(unit, "fakerel")
    open_recording()
    with pytest.raises(RuntimeError, match="boom"):
        wrapped()
    assert sys.getprofile() is None
    assert "fakerel.core:entry" in close_recording()


@pytest.mark.parametrize("package", ["", "sglang.srt"])
def test_package_must_be_a_top_level_name(package: str) -> None:
    with pytest.raises(ValueError, match="top-level package name"):
        recording(print, package)


STAND_IN_SGLANG = """
def _stride(kv_indices, page_size):
    return kv_indices[::page_size]

def kv_to_page_indices(kv_indices, page_size):
    return (_stride(kv_indices, page_size) // page_size).cpu().numpy()
"""

STAND_IN_TARGET = """
from pdverify.targets import load_target
from pdverify.targets.calls import recording
from sglang.srt.mem_cache import common
target = load_target("pdverify").derive(
    "stand-in", kv_to_page_indices=recording(common.kv_to_page_indices, "sglang")
)
"""


def test_the_report_names_per_property_the_release_functions_called(tmp_path: Path) -> None:
    proc, report = run_check_on_stand_in(tmp_path, STAND_IN_SGLANG, STAND_IN_TARGET, "-k", "p1_ or p5_", "-n", "2")
    assert proc.returncode == exitcodes.OK, proc.stdout + proc.stderr
    got = {p["id"]: p for p in json.loads(report.read_text())["properties"]}
    # collected from the xdist workers: P1 calls the stand-in's kv_to_page_indices, P5 (page_align_floor) none
    common = "sglang.srt.mem_cache.common"
    assert got["P1"]["calls"] == [f"{common}:_stride", f"{common}:kv_to_page_indices"]
    assert got["P5"]["calls"] == []


def test_a_named_unit_that_enters_no_release_function_is_undriven(release: object) -> None:
    """A unit is driven when any of its calls entered the package: once is enough, a stand-in never does."""
    driven = recording(release.entry, "fakerel", "driven")  # type: ignore[attr-defined]

    def squares(n: int) -> int:
        return sum(i * i for i in range(n))

    def entry_unless_zero(n: int) -> int:
        return int(release.entry(n)) if n else 0  # type: ignore[attr-defined]

    def zero() -> int:
        return 0

    stand_in = recording(squares, "fakerel", "stand_in")
    sometimes = recording(entry_unless_zero, "fakerel", "sometimes")
    unnamed = recording(zero, "fakerel")
    open_recording()
    assert driven(2) == stand_in(2) == 1 and sometimes(0) == unnamed() == 0
    assert undriven_units() == ["sometimes", "stand_in"]
    sometimes(2)
    assert undriven_units() == ["stand_in"]
    close_recording()
    assert undriven_units() == []  # closed: nothing recorded


STAND_IN_ONLY_TARGET = """
from pdverify.production import page_index as pages
from pdverify.targets import load_target
from pdverify.targets.calls import recording
target = load_target("pdverify").derive(
    "stand-in", kv_to_page_indices=recording(pages.kv_to_page_indices, "sglang", "kv_to_page_indices")
)
"""


def test_a_property_whose_unit_drove_no_release_code_is_vacuous(tmp_path: Path) -> None:
    proc, report = run_check_on_stand_in(tmp_path, STAND_IN_SGLANG, STAND_IN_ONLY_TARGET, "-k", "p1_")
    assert proc.returncode == exitcodes.FAILED, proc.stdout + proc.stderr
    (p1,) = json.loads(report.read_text())["properties"]
    assert p1["status"] == "vacuous" and p1["calls"] == [], p1
    assert p1["message"].startswith("unit(s) kv_to_page_indices entered no function of the release under test")
