"""Loading the project's ``ci/`` scripts in tests: they are scripts, not a package, so each is loaded by path."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

CI = Path(__file__).resolve().parent.parent / "ci"


def load_ci_script(name: str) -> ModuleType:
    """``ci/<name>.py`` as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, CI / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no ci/{name}.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
