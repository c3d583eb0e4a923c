"""The server's configuration as SGLang publishes it: where the release has a runtime context (``create_context``,
0.5.22 on), the drivers run SGLang's code under the context SGLang's own ``ServerArgs`` make for a scheduler of the
disaggregation mode - every leaf at the server's default - with the case's leaves set through each configuration
bag's own ``override``, which refuses a leaf the release does not have. Releases before publish their flags
otherwise (``server_args``, module getters): the drivers patch those in and say so."""

from __future__ import annotations

import contextlib
from typing import Any

_CONTEXTS: dict[str, Any] = {}


def context(mode: str) -> tuple[Any, Any] | None:  # pragma: no cover - conformance venv
    """(``sglang.srt.runtime_context``, a ``mode`` scheduler's context from ``ServerArgs(model_path="dummy",
    device="cpu", disaggregation_mode=mode)``), built once per process and mode; None where the release has no
    ``create_context``."""
    if mode not in _CONTEXTS:
        try:
            from sglang.srt import runtime_context as runtime
            from sglang.srt.server_args import ServerArgs
        except ImportError:
            _CONTEXTS[mode] = None
        else:
            if not hasattr(runtime, "create_context"):
                _CONTEXTS[mode] = None
            else:
                server_args: Any = ServerArgs  # its fields are declared by groups, which mypy does not see
                args = server_args(model_path="dummy", device="cpu", disaggregation_mode=mode)
                _CONTEXTS[mode] = (runtime, runtime.create_context(args, role="scheduler"))
    found: tuple[Any, Any] | None = _CONTEXTS[mode]
    return found


def published(mode: str, leaves: dict[str, dict[str, Any]]) -> contextlib.ExitStack | None:  # pragma: no cover
    """SGLang's own context for a ``mode`` scheduler with ``leaves`` (bag getter, e.g. ``"get_disagg"`` -> leaf ->
    value) set through the bags' ``override``; None where the release has no runtime context."""
    found = context(mode)
    if found is None:
        return None
    runtime, ctx = found
    stack = contextlib.ExitStack()
    stack.enter_context(runtime.use_context(ctx))
    for getter, values in leaves.items():
        stack.enter_context(getattr(runtime, getter)().override(**values))
    return stack
