"""The conformance tests' target: the installed SGLang release, its input domain bound (``bind_release``) so that a
property body run outside ``pdverify check`` draws and discards as the check would."""

from __future__ import annotations

from typing import Any

import pytest

from pdverify.properties.releases import bind_release
from pdverify.targets import Target, load_target


def release_target() -> Target:
    """``load_target("sglang")`` with its release's domain bound."""
    target = load_target("sglang")
    bind_release(target.release)
    return target


def passing_as_released(pid: str, since: str) -> tuple[Target, Any]:
    """The release's target and property ``pid``, which passes on it as released (skipped where ``pid`` is not in the
    release's contract: ``since`` says what it came with)."""
    from pdverify.runner import load_properties, run_property

    target, prop = release_target(), load_properties()[pid]
    released = run_property(prop, target)
    if released.status == "not applicable":
        pytest.skip(f"{pid} is not in sglang {target.release}'s contract ({since})")
    assert released.status == "passed", released.message
    return target, prop
