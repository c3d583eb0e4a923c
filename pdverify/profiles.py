"""Hypothesis settings profiles: ``dev`` (fast, default on a desk), ``ci`` (derandomized, more examples, loaded when
``CI`` is set), ``thorough`` (nightly and GPU runners), ``mutate`` (a quick, derandomized run per mutant),
``generation`` (generated examples only, unshrunk: examples-to-failure) and ``shrink`` (generated examples only,
shrunk: a finding's smallest generated input). Select with ``--hypothesis-profile NAME`` or ``pdverify check
--profile NAME``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)


def example_database(environ: dict[str, str] | None = None) -> ExampleDatabase:
    """The example database of the non-derandomized profiles, shared the way Hypothesis intends.

    * default: a local directory (``PDVERIFY_DB_DIR``, else ``.hypothesis/examples``);
    * ``PDVERIFY_GITHUB_DB=owner/repo`` (CI): the local directory plus, read-only, the ``hypothesis-example-db``
      artifact of that repository's previous runs (``GitHubArtifactDatabase``; needs ``GITHUB_TOKEN``), so a
      failure found once on a GPU runner is replayed by every later run;
    * ``PDVERIFY_REDIS_DB=redis://host:port`` (fuzzing campaigns): one Redis database shared by every worker.
    """
    env = os.environ if environ is None else environ
    local: ExampleDatabase = DirectoryBasedExampleDatabase(env.get("PDVERIFY_DB_DIR", ".hypothesis/examples"))
    if env.get("PDVERIFY_REDIS_DB"):
        from hypothesis.extra.redis import RedisExampleDatabase
        from redis import Redis

        return RedisExampleDatabase(Redis.from_url(env["PDVERIFY_REDIS_DB"]))
    shared = env.get("PDVERIFY_GITHUB_DB", "")
    if shared:
        owner, _, repo = shared.partition("/")
        if not owner or not repo:
            raise ValueError(f"PDVERIFY_GITHUB_DB must be 'owner/repo', got {shared!r}")
        return MultiplexedDatabase(local, ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo)))
    return local


PROFILES: dict[str, dict[str, Any]] = {
    "dev": {"max_examples": 40, "deadline": None},
    "ci": {
        "max_examples": 100,
        "deadline": None,
        "derandomize": True,
        "database": None,
        "print_blob": True,
        "suppress_health_check": [HealthCheck.too_slow],
    },
    "thorough": {
        "max_examples": 1000,
        "deadline": None,
        "print_blob": True,
        "suppress_health_check": [HealthCheck.too_slow],
    },
    "generation": {
        # pdverify mutate --generation-only: generated examples only (no explicit example, no database replay, no
        # shrinking: the first failing example is what is measured); seeded per run by the caller
        "max_examples": 200,
        "phases": [Phase.generate],
        "report_multiple_bugs": False,
        "deadline": None,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
    },
    "shrink": {
        # recording a finding's shrunk example: generated examples only (no explicit example, no database replay),
        # the first failure shrunk to the smallest input that still fails the same way; seeded per run
        "max_examples": 200,
        "phases": [Phase.generate, Phase.shrink],
        "report_multiple_bugs": False,
        "deadline": None,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
    },
    "mutate": {
        "max_examples": 100,
        "report_multiple_bugs": False,
        "deadline": None,
        "derandomize": True,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow],
    },
}


def register_profiles() -> None:
    """Register every profile; ``dev`` and ``thorough`` (not derandomized) use ``example_database()``."""
    database = example_database()
    for name, options in PROFILES.items():
        extra: dict[str, Any] = {} if options.get("derandomize") or "database" in options else {"database": database}
        settings.register_profile(name, **options, **extra)


@contextmanager
def restoring_default_profile() -> Iterator[None]:
    """Put the caller's default settings back after a block that loads another profile (a nested pytest
    run, a property run under a chosen profile)."""
    outer = settings.default
    try:
        yield
    finally:
        if outer is not None:
            settings.register_profile("_pdverify_outer", outer)
            settings.load_profile("_pdverify_outer")


def default_profile() -> str:
    """``ci`` on a CI machine, else ``dev``; ``PDVERIFY_PROFILE`` overrides both."""
    chosen = os.environ.get("PDVERIFY_PROFILE")
    if chosen:
        return chosen
    return "ci" if os.environ.get("CI") else "dev"


register_profiles()
