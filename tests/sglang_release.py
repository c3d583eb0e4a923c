"""The conformance tests' target: the installed SGLang release, its input domain bound (``bind_release``) so that a
property body run outside ``pdverify check`` draws and discards as the check would."""

from __future__ import annotations

from pdverify.properties.releases import bind_release
from pdverify.targets import Target, load_target


def release_target() -> Target:
    """``load_target("sglang")`` with its release's domain bound."""
    target = load_target("sglang")
    bind_release(target.release)
    return target
