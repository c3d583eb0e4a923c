"""Adding a request field through the registry: one entry, and every batch strategy and target sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pdverify.oracle.prebuilt import expected_prebuilt
from pdverify.production.prebuilt import prepare_for_prebuilt
from pdverify.strategies import RequestField, batches, registered
from pdverify.strategies.fields import REGISTRY, expected_effects, register_field, unregister_field
from pdverify.targets import Target, load_target
from pdverify.targets.layouts import run_prepare_for_prebuilt
from pdverify.targets.protocol import ServerRefuses

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def priority_field() -> Iterator[RequestField]:
    with registered(RequestField("priority", st.integers(1, 3), default=0, description="scheduler priority")) as f:
        yield f


def clobbering_target() -> Target:
    """A target whose prepare_for_prebuilt resets the (registered) priority field: P30 must catch it."""

    def prepare(batch: Any) -> None:
        prepare_for_prebuilt(batch)
        for req in batch.reqs:
            req.priority = 0

    return load_target("pdverify").derive("clobber-priority", prepare_for_prebuilt=prepare)


def test_registered_field_reaches_batches_and_targets() -> None:
    seen: list[Any] = []

    @settings(max_examples=20, database=None)
    @given(batch=batches(min_requests=1))
    def check(batch: Any) -> None:
        for req in batch.reqs:
            assert 1 <= req.extra["priority"] <= 3
        try:
            out = run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")
        except ServerRefuses:
            reject()  # a sampling seed 0.5.23's verify refuses: no server prepares such a batch
        exp = expected_prebuilt(batch, expected_effects())
        assert [r.extra for r in out.reqs_after] == [r.extra for r in exp.reqs_after]
        seen.append(out.batch_object.reqs[0].priority)

    with priority_field():
        check()
    assert seen and "priority" not in REGISTRY


def test_expected_effect_is_applied() -> None:
    spec = RequestField("ticks", st.integers(0, 5), expected_after=lambda v: v + 1)
    with registered(spec):
        batch = one_batch()
    batch.reqs[0].extra = {"ticks": 2}
    exp = expected_prebuilt(batch, {"ticks": spec.expected_after})
    assert exp.reqs_after[0].extra == {"ticks": 3}


def test_oracle_refuses_a_field_without_effect() -> None:
    batch = one_batch()
    batch.reqs[0].extra = {"mystery": 1}
    with pytest.raises(ValueError, match="mystery"):
        expected_prebuilt(batch, {})


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (RequestField("not an identifier", st.none()), "identifier"),
        (RequestField("prefix_len", st.none()), "built-in"),
        (RequestField("x", 5), "SearchStrategy"),  # type: ignore[arg-type]
        (RequestField("y", st.none(), expected_after=3), "callable"),  # type: ignore[arg-type]
    ],
)
def test_bad_fields_rejected(spec: RequestField, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        register_field(spec)


def test_double_registration_and_unknown_removal() -> None:
    with priority_field(), pytest.raises(InvalidArgument, match="already"):
        register_field(RequestField("priority", st.none()))
    with pytest.raises(InvalidArgument, match="not registered"):
        unregister_field("priority")


def one_batch() -> Any:
    """A single drawn batch (``find`` rather than ``.example()``, which is for interactive use)."""
    from hypothesis import find

    return find(batches(min_requests=1, max_requests=1), lambda b: True, settings=settings(database=None))


USER_FIELDS = '''"""A user's own request field, registered where the guide says: a module named with --fields."""

from hypothesis import strategies as st

from pdverify.strategies import RequestField, register_field

register_field(RequestField("my_priority", st.integers(0, 3), default=0, description="scheduler priority"))
'''


def _check_with_fields(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    (tmp_path / "my_pd_fields.py").write_text(USER_FIELDS)
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--fields", "my_pd_fields", "--profile", "ci",
           "--device", "cpu", "--report", str(report), *args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=600)
    return done, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("jobs", ["0", "2"])
def test_a_field_registered_in_a_users_module_is_drawn_everywhere(tmp_path: Path, jobs: str) -> None:
    done, report = _check_with_fields(tmp_path, "-n", jobs, "-k", "p30 or p9_ or d1 or q1 or s9")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert report["fields"]["my_priority"] > 100, report["fields"]
    assert {p["id"] for p in report["properties"]} == {"P30", "P9", "D1", "Q1", "S9"}


def test_a_registered_field_never_drawn_fails_the_run(tmp_path: Path) -> None:
    done, report = _check_with_fields(tmp_path, "-k", "p1_")
    assert done.returncode == 1, done.stdout[-2000:]
    assert report["fields"] == {"my_priority": 0}
    assert "registered request field(s) my_priority never drawn" in done.stdout


def test_a_missing_fields_module_is_a_usage_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--fields", "no_such_fields_module"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 2 and "--fields: no module 'no_such_fields_module'" in done.stderr


def test_the_default_is_what_a_request_built_without_the_field_holds() -> None:
    from pdverify.properties.test_prebuilt import seed_batch
    from pdverify.strategies.fields import with_defaults

    with priority_field():
        batch = with_defaults(seed_batch())
        assert [r.extra for r in batch.reqs] == [{"priority": 0}]
        out = run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")
        assert out.batch_object.reqs[0].priority == 0
    assert with_defaults(seed_batch()).reqs[0].extra == {}
