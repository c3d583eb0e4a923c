"""Inputs that do not depend on where the code under test is installed.

Hypothesis mixes literal constants mined from "local" modules - any imported file outside site-packages and the
standard library - into the integers and strings it draws. A release put on ``PYTHONPATH`` (the release matrix's
``.sglang-releases/<VERSION>/``) is local, the same release in a venv's site-packages is not: the same
derandomized check would draw different inputs in the two layouts. ``pin_local_constants`` makes only pdverify's
strategies and model local - the code that shapes what is drawn, imported by every property module in every
process - whatever the target's layout and whether pdverify itself is installed editable or not. (Any module that
is imported in one process and not another - the command line in a serial run, not in a pytest-xdist worker -
would make the two draw different inputs.)

``PDVERIFY_HYPOTHESIS_LOCAL_CONSTANTS=1`` leaves Hypothesis's own rule in place (to compare the two).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_ROOTS = tuple(str(root) + os.sep for root in ((_HERE / "strategies").resolve(), _HERE / "model"))


def suite_module_file(path: str) -> bool:
    """Whether ``path`` is one of the modules whose constants may seed generation: pdverify's strategies and
    model."""
    return str(Path(path).resolve()).startswith(_ROOTS)


def pin_local_constants() -> bool:
    """Restrict Hypothesis's local-constant collection to pdverify's own modules; True when pinned (False: this
    Hypothesis collects no local constants, or the environment asked for its own rule)."""
    if os.environ.get("PDVERIFY_HYPOTHESIS_LOCAL_CONSTANTS") == "1":
        return False
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis without the module
        return False
    current: Any = getattr(providers, "is_local_module_file", None)
    if current is None:  # pragma: no cover - a Hypothesis without local constants
        return False
    if current is not suite_module_file:
        setattr(providers, "is_local_module_file", suite_module_file)  # noqa: B010 - a private name mypy must not check
    return True
