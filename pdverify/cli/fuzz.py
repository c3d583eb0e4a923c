"""``pdverify fuzz``: a fuzzing campaign over the shipped property suite with HypoFuzz, for a fixed time.

A thin layer over ``hypothesis fuzz`` (HypoFuzz, ``pip install 'pdverify[fuzz]'``): it runs the properties of
``pdverify/properties`` on a target with ``K`` worker processes for ``M`` minutes, all sharing one Hypothesis
example database, then stops the campaign and reads back what HypoFuzz recorded in that database:

* per property: behaviours and fingerprints (HypoFuzz's coverage measures: branches and branch sets seen),
  examples run, and examples per second per worker;
* the same figures sampled over time (every ``--sample`` seconds), so a campaign shows whether coverage is
  still growing;
* every failure HypoFuzz found and shrank. It is stored under the property's ordinary Hypothesis key, so
  ``pdverify check`` with a profile that uses the database (``dev``, ``thorough``) and the same
  ``PDVERIFY_DB_DIR`` (or ``PDVERIFY_REDIS_DB``) replays it as its first example.

Exit codes: 0 the campaign ran and found no failure; 1 it found one (listed); 2 bad arguments or HypoFuzz is
not installed.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdverify.cli import exitcodes

PROPERTIES_DIR = Path(__file__).resolve().parent.parent / "properties"


@dataclass
class PropertyFuzz:
    id: str
    nodeid: str
    behaviors: int = 0
    fingerprints: int = 0
    examples: int = 0
    workers: dict[str, float] = field(default_factory=dict)
    """HypoFuzz report stream (worker uuid) -> its examples per second on this property."""
    failures: int = 0


def _database() -> Any:
    from pdverify.profiles import example_database

    return example_database()


def _keys(device: str = "cpu") -> dict[str, tuple[bytes, str]]:
    """property id -> (its Hypothesis database key, pytest node id); the state machine is not fuzzed.

    Hypothesis keys each parametrized test (here: by device) by its function digest plus its node id, which
    ``pdverify check`` and ``pdverify fuzz`` both give relative to the properties folder."""
    from hypothesis.internal.reflection import function_digest

    from pdverify.runner import load_properties

    out = {}
    for pid, info in load_properties().items():
        given = getattr(info.test, "hypothesis", None)
        if given is None:
            continue
        nodeid = f"{info.module.rpartition('.')[2]}.py::{info.name}[{device}]"
        inner = given.inner_test
        saved = getattr(inner, "_hypothesis_internal_add_digest", None)
        inner._hypothesis_internal_add_digest = nodeid.encode()
        try:
            out[pid] = (function_digest(inner), nodeid)
        finally:
            if saved is None:
                del inner._hypothesis_internal_add_digest
            else:
                inner._hypothesis_internal_add_digest = saved
    return out


def read_campaign(db: Any, keys: dict[str, tuple[bytes, str]]) -> list[PropertyFuzz]:
    """What HypoFuzz recorded in ``db`` for each property (latest report of each worker, summed)."""
    from hypofuzz.database import HypofuzzDatabase

    hdb = HypofuzzDatabase(db)
    out = []
    for pid, (key, name) in keys.items():
        reports = list(hdb.reports.fetch(key))
        latest: dict[str, Any] = {}
        for rep in reports:
            if rep.worker_uuid not in latest or rep.elapsed_time >= latest[rep.worker_uuid].elapsed_time:
                latest[rep.worker_uuid] = rep
        row = PropertyFuzz(pid, name)
        for uuid, rep in latest.items():
            count = sum(rep.status_counts.values())
            row.examples += count
            row.behaviors = max(row.behaviors, rep.behaviors)
            row.fingerprints = max(row.fingerprints, rep.fingerprints)
            row.workers[uuid[:8]] = round(count / rep.elapsed_time, 1) if rep.elapsed_time else 0.0
        row.failures = len(list(db.fetch(key)))
        if latest or row.failures:
            out.append(row)
    return out


def _campaign_environment() -> dict[str, str]:
    """This environment without the variables that make Hypothesis load its derandomized ``ci`` profile when
    a test module is imported (``CI``, ``GITHUB_ACTIONS``, ...): HypoFuzz skips a derandomized test, so a
    campaign started from a CI job would collect nothing."""
    from hypothesis import _settings

    ci_vars = getattr(_settings, "_CI_VARS", {"CI": None})
    return {k: v for k, v in os.environ.items() if k not in ci_vars}


def run_fuzz(
    *,
    target: str,
    minutes: float,
    workers: int,
    keyword: str | None,
    sample: float,
    json_path: Path | None,
    echo: Any = None,
) -> int:
    """Run the campaign and print its figures; ``echo`` (default: ``print``, flushed) receives every line."""
    echo = echo or functools.partial(print, flush=True)
    try:
        import hypofuzz  # noqa: F401
    except ImportError:
        echo("pdverify fuzz: HypoFuzz is not installed (pip install 'pdverify[fuzz]' or pip install hypofuzz)")
        return exitcodes.USAGE
    if minutes <= 0 or workers < 1 or sample <= 0:
        echo("pdverify fuzz: --minutes and --sample must be > 0 and --workers >= 1")
        return exitcodes.USAGE
    command = [
        sys.executable, "-c", "from hypothesis.extra.cli import main; main()", "fuzz", "-n", str(workers),
        "--no-dashboard", "--", str(PROPERTIES_DIR), "-p", "no:cacheprovider", "-o", "python_files=test_*.py",
        f"--rootdir={PROPERTIES_DIR}", "--pdverify-target", target, "--pdverify-device", "cpu",
        "--hypothesis-profile", "thorough", "-k", f"not test_m1 and ({keyword})" if keyword else "not test_m1",
    ]  # fmt: skip
    db, keys = _database(), _keys()
    echo(f"pdverify fuzz: target {target!r}, {workers} worker(s), {minutes:g} min, database {db!r}")
    log = open(os.environ.get("PDVERIFY_FUZZ_LOG", os.devnull), "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=_campaign_environment()
    )
    timeline: list[dict[str, Any]] = []
    t0 = time.monotonic()
    deadline = t0 + minutes * 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(min(sample, max(0.0, deadline - time.monotonic())))
            rows = read_campaign(db, keys)
            point = {
                "elapsed_s": round(time.monotonic() - t0, 1),
                "behaviors": sum(r.behaviors for r in rows),
                "fingerprints": sum(r.fingerprints for r in rows),
                "examples": sum(r.examples for r in rows),
                "failures": sum(r.failures for r in rows),
            }
            timeline.append(point)
            echo(
                f"  {point['elapsed_s']:7.0f}s  behaviours {point['behaviors']:6}  fingerprints "
                f"{point['fingerprints']:6}  examples {point['examples']:9}  failures {point['failures']}"
            )
    finally:
        early = proc.poll()
        if early is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    if early is not None:
        echo(f"pdverify fuzz: the campaign stopped by itself after {time.monotonic() - t0:.0f}s (exit {early})")
        return exitcodes.FAILED
    rows = read_campaign(db, keys)
    echo(f"{'property':9} {'behaviours':>10} {'fingerprints':>12} {'examples':>9} {'ex/s per worker':>24} failures")
    for r in rows:
        rates = " ".join(f"{v:.0f}" for v in r.workers.values())
        echo(f"{r.id:9} {r.behaviors:10} {r.fingerprints:12} {r.examples:9} {rates:>24} {r.failures}")
    failed = [r for r in rows if r.failures]
    wall = time.monotonic() - t0
    total = sum(r.examples for r in rows)
    echo(
        f"campaign: {len(rows)} properties, {total} examples in {wall:.0f}s: {total / wall:.1f} examples/s, "
        f"{total / wall / workers:.1f} per worker; behaviours {sum(r.behaviors for r in rows)}, fingerprints "
        f"{sum(r.fingerprints for r in rows)}, failures {sum(r.failures for r in rows)}"
    )
    db_dir = os.environ.get("PDVERIFY_DB_DIR", ".hypothesis/examples")
    for r in failed:
        test = r.nodeid.split("::")[1].split("[")[0]
        echo(
            f"failure in {r.id}: replay it with PDVERIFY_DB_DIR={db_dir} "
            f"pdverify check --target {target} --profile thorough --device cpu -k {test}"
        )
    if json_path is not None:
        json_path.write_text(
            json.dumps(
                {
                    "target": target,
                    "minutes": minutes,
                    "workers": workers,
                    "properties": [asdict(r) for r in rows],
                    "timeline": timeline,
                    "wall_s": round(wall, 1),
                    "examples_per_s_per_worker": round(total / wall / workers, 2),
                },
                indent=2,
            )
            + "\n"
        )
    return exitcodes.FAILED if failed else exitcodes.OK
