"""The pytest plugin that runs pdverify's property suite against a target (entry point ``pdverify``).

A shim: pytest imports entry-point plugins before coverage measurement starts, so this module imports
nothing of pdverify at import time and hands every hook to ``pdverify.plugin``, imported on first use.
Options: ``--pdverify-target``, ``--pdverify-device``, ``--pdverify-timeout`` (see ``pdverify.plugin``).
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pdverify")
    group.addoption(
        "--pdverify-target",
        default=os.environ.get("PDVERIFY_TARGET", "pdverify"),
        help="target to verify: pdverify, legacy, pr35070, fast, sglang, mutant:ID or package.module:attr",
    )
    group.addoption(
        "--pdverify-device",
        default="all",
        choices=("all", "cpu", "cuda"),
        help="devices to run properties on (cuda is skipped when absent)",
    )
    group.addoption(
        "--pdverify-seed",
        type=int,
        default=None,
        help="seed every property's random generation (the example database stays in use, unlike --hypothesis-seed)",
    )
    group.addoption(
        "--pdverify-fields",
        default="",
        help="comma-separated modules that register request fields (pdverify.strategies.fields), imported in every "
        "process; modules published as pdverify.fields entry points are imported too",
    )
    group.addoption(
        "--pdverify-known-findings",
        default="apply",
        choices=("apply", "ignore"),
        help="apply: a recorded finding's failures inside its signature are counted and set aside and the search goes "
        "on (pdverify.findings); ignore: every failure is a plain failure",
    )
    group.addoption(
        "--pdverify-timeout",
        type=float,
        default=0.0,
        help="per-example time limit in seconds for properties (0: none); a hang is reported against the property",
    )


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin loads the profile named on the command line
def pytest_configure(config: pytest.Config) -> None:
    from pdverify import plugin

    config.pluginmanager.register(plugin, "pdverify-impl")
    plugin.configure(config)
