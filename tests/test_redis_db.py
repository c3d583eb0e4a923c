"""The shared Redis example database against a real Redis server on loopback: a failure one run stores is
replayed first by the next run, whatever its seed. Skips (saying why) where no redis-server is installed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server not installed (.ci/run installs it with apt-get)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    proc = subprocess.Popen([server, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def check(url: str, seed: int, report: Path) -> dict[str, object]:
    env = {**os.environ, "PDVERIFY_REDIS_DB": url}
    subprocess.run(
        [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "tests.user_targets:rare_fault", "--profile",
         "thorough", "--device", "cpu", "-k", "p1_", "--seed", str(seed), "--report", str(report)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    (prop,) = json.loads(report.read_text())["properties"]
    return dict(prop)


def test_a_stored_failure_is_replayed_from_redis(redis_url: str, tmp_path: Path) -> None:
    from pdverify.profiles import example_database

    db = example_database({"PDVERIFY_REDIS_DB": redis_url})
    assert type(db).__name__ == "RedisExampleDatabase"
    for seed in range(1, 11):  # a run that finds the planted fault by generation stores it in Redis
        first = check(redis_url, seed, tmp_path / "a.json")
        if first["status"] == "failed":
            break
    assert first["status"] == "failed" and first["first_failure"] != 5, first
    again = check(redis_url, 987654, tmp_path / "b.json")
    # P1's four explicit examples pass; the failure stored in Redis is the fifth example, whatever the seed
    assert again["status"] == "failed" and again["first_failure"] == 5, again
