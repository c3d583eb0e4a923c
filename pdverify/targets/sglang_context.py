"""The server's configuration as SGLang publishes it: where the release has a runtime context (``create_context``,
0.5.22 on), the drivers run SGLang's code under the context SGLang's own ``ServerArgs`` make for a scheduler of the
disaggregation mode - every leaf at the server's default - with the case's leaves set through each configuration
bag's own ``override``, which refuses a leaf the release does not have. Releases before publish their flags
otherwise (``server_args``, module getters): the drivers patch those in and say so."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any
from unittest import mock

_CONTEXTS: dict[str, Any] = {}


def context(mode: str) -> tuple[Any, Any] | None:  # pragma: no cover - conformance venv
    """(``sglang.srt.runtime_context``, a ``mode`` scheduler's context from ``ServerArgs(model_path="dummy",
    device="cpu", disaggregation_mode=mode)``), built once per process and mode; None where the release has no
    ``create_context``."""
    if mode not in _CONTEXTS:
        runtime = _runtime_module()
        if runtime is None or not hasattr(runtime, "create_context"):
            _CONTEXTS[mode] = None
        else:
            args = _default_server_args(mode, resolved=True)
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


@functools.cache
def _default_server_args(mode: str, *, resolved: bool) -> Any:  # pragma: no cover - conformance venv
    """The release's ``ServerArgs`` for a ``mode`` server at every default, built once per process: through its
    constructor where ``resolved`` (``__post_init__`` resolves the defaults), else each declared field at its
    declared default (0.5.3.post2-0.5.5's ``__post_init__`` reads the model's Hugging Face config, which a ``dummy``
    model path has not)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    server_args: Any = ServerArgs  # its fields are declared by groups, which mypy does not see
    if resolved:
        return server_args(model_path="dummy", device="cpu", disaggregation_mode=mode)
    args = object.__new__(server_args)
    for f in dataclasses.fields(server_args):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    args.model_path, args.device, args.disaggregation_mode = "dummy", "cpu", mode
    return args


@contextlib.contextmanager
def prebuilt_scheduler(batch: Any) -> Any:  # pragma: no cover - conformance venv
    """What a decode scheduler of the installed release has published when it calls ``prepare_for_prebuilt`` on
    ``batch`` - the server's configuration at every default, as the release reads it - for the code that call runs
    (``SamplingBatchInfo.from_schedule_batch`` reads ``enable_custom_logit_processor`` and, from 0.5.3,
    ``enable_deterministic_inference``):

    * 0.5.22 on: SGLang's own context for a decode scheduler (``context``), in use for the block;
    * 0.5.15-0.5.21 (a ``RuntimeContext`` that holds the server arguments, no ``create_context``; 0.5.15-0.5.16's
      ``get_global_server_args`` reads it): a fresh ``RuntimeContext`` the release's own ``publish`` (0.5.17 on) or
      ``set_server_args`` (0.5.15-0.5.16) projects the server arguments into, swapped in for the block as the
      process context (and swapped out after, so no other driver sees it);
    * 0.5.3.post2-0.5.14: the server arguments set as ``set_global_server_args_for_scheduler`` sets them, the
      previous ones put back after (0.5.14's ``runtime_context`` does not hold them yet);
    * 0.5.1-0.5.3.post1: nothing - ``global_server_args_dict`` holds the defaults from import;
    * 0.4.x: the batch carries ``enable_custom_logit_processor``, which ``ScheduleBatch.init_new`` copies from the
      server arguments.

    Before any of it, each request's sampling parameters pass the release's own ``SamplingParams.verify`` (what the
    tokenizer manager runs before a request reaches a scheduler): a request it refuses raises ``ServerRefuses``.
    """
    from sglang.srt import server_args as server_args_module

    _verify_sampling(batch)
    stack = published("decode", {})
    if stack is not None:
        with stack:
            yield
        return
    runtime = _runtime_module()
    if runtime is not None and hasattr(getattr(runtime, "RuntimeContext", None), "set_server_args"):
        with _as_process_context(runtime, _runtime_context(runtime)):
            yield
        return
    if hasattr(server_args_module, "set_global_server_args_for_scheduler"):
        args = _default_server_args("decode", resolved=False)
        with mock.patch.object(server_args_module, "_global_server_args", args):
            yield
        return
    if _batch_flag():
        declared: Any = server_args_module.ServerArgs  # its fields are declared by groups, which mypy does not see
        batch.enable_custom_logit_processor = declared.enable_custom_logit_processor
    yield


def _verify_sampling(batch: Any) -> None:  # pragma: no cover - conformance venv
    """Each request's ``sampling_params.verify`` as the release defines it (with the vocabulary size from 0.5.x,
    without before); ``ServerRefuses`` with the release's message where it refuses one."""
    import inspect

    from pdverify.targets.protocol import ServerRefuses

    for req in batch.reqs:
        verify = req.sampling_params.verify
        try:
            verify(batch.model_config.vocab_size) if inspect.signature(verify).parameters else verify()
        except ValueError as exc:
            raise ServerRefuses(f"SamplingParams.verify refuses request {req.rid!r}: {exc}") from None


def _runtime_module() -> Any:  # pragma: no cover - conformance venv
    """``sglang.srt.runtime_context`` (0.5.14 on), None before."""
    try:
        from sglang.srt import runtime_context
    except ImportError:
        return None
    return runtime_context


@functools.cache
def _runtime_context(runtime: Any) -> Any:  # pragma: no cover - conformance venv
    """A ``RuntimeContext`` of 0.5.15-0.5.21 with a decode scheduler's default server arguments projected into it
    by the release's own ``publish`` (0.5.17 on; it publishes into the module's ``_CONTEXT``, swapped for the call)
    or ``set_server_args`` (0.5.15-0.5.16); built once per process."""
    ctx = runtime.RuntimeContext(parallel=runtime.ParallelContext())
    args = _default_server_args("decode", resolved=True)
    if hasattr(runtime, "publish"):
        with _as_process_context(runtime, ctx):
            runtime.publish(args, role="scheduler")
    else:
        ctx.set_server_args(args)
    return ctx


@contextlib.contextmanager
def _as_process_context(runtime: Any, ctx: Any) -> Iterator[None]:  # pragma: no cover - conformance venv
    """``ctx`` in place of the release's process context (``_CONTEXT`` and its ``_PARALLEL``) for the block."""
    with mock.patch.object(runtime, "_CONTEXT", ctx), mock.patch.object(runtime, "_PARALLEL", ctx.parallel):
        yield


def _batch_flag() -> bool:  # pragma: no cover - conformance venv
    """Whether the release's ``ScheduleBatch`` carries ``enable_custom_logit_processor`` (0.4.x), which its
    ``SamplingBatchInfo.from_schedule_batch`` reads off the batch."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    return "enable_custom_logit_processor" in getattr(ScheduleBatch, "__dataclass_fields__", {})
