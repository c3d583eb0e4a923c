"""Hypothesis settings profiles: ``dev`` (fast, default on a desk), ``ci`` (derandomized, more examples,
loaded when ``CI`` is set), ``thorough`` (nightly and GPU runners) and ``mutate`` (a quick, derandomized run
per mutant). Select with ``--hypothesis-profile NAME`` or ``pdverify check --profile NAME``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES: dict[str, dict[str, object]] = {
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
    "mutate": {
        "max_examples": 60,
        "report_multiple_bugs": False,
        "deadline": None,
        "derandomize": True,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow],
    },
}


def register_profiles() -> None:
    for name, options in PROFILES.items():
        settings.register_profile(name, **options)  # type: ignore[arg-type]


def default_profile() -> str:
    """``ci`` on a CI machine, else ``dev``; ``PDVERIFY_PROFILE`` overrides both."""
    chosen = os.environ.get("PDVERIFY_PROFILE")
    if chosen:
        return chosen
    return "ci" if os.environ.get("CI") else "dev"


register_profiles()
