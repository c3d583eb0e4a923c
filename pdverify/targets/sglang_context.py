"""The server's configuration as SGLang publishes it: where the release has a runtime context (``create_context``,
0.5.22 on), the drivers run SGLang's code under the context SGLang's own ``ServerArgs`` make for a scheduler of the
disaggregation mode - every leaf at the server's default - with the case's leaves set through each configuration
bag's own ``override``, which refuses a leaf the release does not have. Releases before publish their flags
otherwise (``server_args``, module getters): the drivers patch those in and say so."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

Flags = tuple[tuple[str, Any], ...]
"""Server arguments set away from their defaults (``ServerArgs`` field, value), in a fixed order: a cache key."""

_CONTEXTS: dict[tuple[str, Flags], Any] = {}


def context(mode: str, flags: Flags = ()) -> tuple[Any, Any] | None:  # pragma: no cover - conformance venv
    """(``sglang.srt.runtime_context``, a ``mode`` scheduler's context from ``ServerArgs(model_path="dummy",
    device="cpu", disaggregation_mode=mode, **flags)``), built once per process, mode and flags; None where the
    release has no ``create_context``."""
    key = (mode, flags)
    if key not in _CONTEXTS:
        runtime = _runtime_module()
        if runtime is None or not hasattr(runtime, "create_context"):
            _CONTEXTS[key] = None
        else:
            args = server_args(mode, flags, resolved=True)
            _CONTEXTS[key] = (runtime, runtime.create_context(args, role="scheduler"))
    found: tuple[Any, Any] | None = _CONTEXTS[key]
    return found


def published(  # pragma: no cover - conformance venv
    mode: str, leaves: dict[str, dict[str, Any]], flags: Flags = ()
) -> contextlib.ExitStack | None:
    """SGLang's own context for a ``mode`` scheduler started with ``flags``, with ``leaves`` (bag getter, e.g.
    ``"get_disagg"`` -> leaf -> value) set through the bags' ``override``; None where the release has no runtime
    context."""
    found = context(mode, flags)
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


@functools.cache
def server_args(mode: str, flags: Flags, *, resolved: bool) -> Any:  # pragma: no cover - conformance venv
    """The release's ``ServerArgs`` for a ``mode`` server started with ``flags`` (the rest at their defaults, as
    ``_default_server_args``), built once per process. Its own validation decides where ``resolved``: a flag it
    rejects, or one the release does not have, is a server that refuses to start (``ServerRefuses``)."""
    import inspect

    from sglang.srt.server_args import ServerArgs

    from pdverify.targets.protocol import ServerRefuses

    if not flags:
        return _default_server_args(mode, resolved=resolved)
    declared: Any = ServerArgs  # its fields are declared by groups from 0.5.22, which mypy does not see
    known = inspect.signature(declared).parameters
    missing = [name for name, _ in flags if name not in known]
    if missing:
        raise ServerRefuses(f"this release's server has no {', '.join('--' + m.replace('_', '-') for m in missing)}")
    if not resolved:
        args = copy.copy(_default_server_args(mode, resolved=False))
        for name, value in flags:
            setattr(args, name, value)
        return args
    try:
        return declared(model_path="dummy", device="cpu", disaggregation_mode=mode, **dict(flags))
    except (ValueError, AssertionError, NotImplementedError) as exc:
        raise ServerRefuses(f"ServerArgs refuses {dict(flags)}: {exc}") from None


def builds_server_args() -> bool:  # pragma: no cover - conformance venv
    """Whether the installed release's ``ServerArgs`` are built through their constructor here (``server_args(...,
    resolved=True)``): where SGLang projects them into a runtime context (0.5.15 on), as the scheduler does; before,
    each field at its declared default (0.5.3.post2-0.5.5's constructor reads the model's files)."""
    runtime = _runtime_module()
    return runtime is not None and (
        hasattr(runtime, "create_context") or hasattr(getattr(runtime, "RuntimeContext", None), "set_server_args")
    )


def server_published(mode: str, flags: Flags = ()) -> contextlib.AbstractContextManager[Any] | None:  # pragma: no cover
    """The server's configuration published as a ``mode`` server of the installed release publishes it, for a
    block: SGLang's own context (0.5.22 on); a ``RuntimeContext`` holding the server arguments, swapped in as the
    process context (0.5.15-0.5.21); the global server arguments patched in (0.5.3.post2-0.5.14). None before, where
    the release publishes nothing of the kind (the callers set what those releases read)."""
    from sglang.srt import server_args as server_args_module

    stack = published(mode, {}, flags)
    if stack is not None:
        return stack
    runtime = _runtime_module()
    if runtime is not None and hasattr(getattr(runtime, "RuntimeContext", None), "set_server_args"):
        return _as_process_context(runtime, _runtime_context(runtime, flags))
    if hasattr(server_args_module, "set_global_server_args_for_scheduler"):
        args = server_args(mode, flags, resolved=False)  # refuses a flag the release does not have
        return mock.patch.object(server_args_module, "_global_server_args", args)
    return None


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

    The server flags are the batch's (``PrebuiltBatch.server_flags``, on the duck as ``pdverify_server``), set in
    each era's form: the ``ServerArgs`` the context or the global arguments are built from (``server_args``: a flag
    the release does not have, or that its validation rejects, is ``ServerRefuses``), 0.5.1-0.5.3.post1's
    ``global_server_args_dict`` entries, 0.4.x's batch flag. Each request gets the server's tokenizer, as the
    scheduler hands it over on receipt (``req.tokenizer = self.tokenizer``): None with ``--skip-tokenizer-init``, else
    a stand-in for a Hugging Face tokenizer (a model's files), with the batch's end-of-sequence token and its
    additional stop token in its added vocabulary, from which the release's own ``attach_additional_stop_token_ids``
    sets ``additional_stop_token_ids``; and the model configuration's eos ids as its ``eos_token_ids``.

    Before any of it, each request's sampling parameters pass the release's own ``SamplingParams.normalize`` (with
    the server's tokenizer, None with ``--skip-tokenizer-init``) and ``verify`` (what the tokenizer manager runs
    before a request reaches a scheduler): a request they refuse raises ``ServerRefuses``.
    """
    server = getattr(batch, "pdverify_server", None)
    tokenizer = None if server is None else server_tokenizer(server)
    if tokenizer is not None:
        attach_release_stop_tokens(tokenizer)
    _verify_sampling(batch, tokenizer)
    flags: Flags = server.flags if server is not None else ()
    if server is not None:
        eos_ids = model_eos_token_ids(server)  # one set for every request, as the scheduler's model config is one
        for req in batch.reqs:
            req.tokenizer, req.eos_token_ids = tokenizer, eos_ids
    scope = server_published("decode", flags)
    if scope is not None:
        with scope:
            yield
        return
    args = server_args("decode", flags, resolved=False)  # refuses a flag the release does not have
    if _batch_flag():
        batch.enable_custom_logit_processor = args.enable_custom_logit_processor
        yield
        return
    from sglang.srt.managers import schedule_batch

    published_dict = schedule_batch.__dict__["global_server_args_dict"]  # 0.5.1-0.5.3.post1 only
    with mock.patch.dict(published_dict, {name: getattr(args, name) for name, _ in flags}):
        yield


def model_eos_token_ids(server: Any) -> set[int] | None:
    """What the scheduler passes each request as ``eos_token_ids`` (``Req(..., eos_token_ids=self.model_config.
    hf_eos_token_id)``): the model configuration's eos ids as a set, None where it has none."""
    ids = set(getattr(server, "model_eos_token_ids", ()))
    return ids or None


EOM = "<|eom_id|>"
"""The added token every release's ``attach_additional_stop_token_ids`` makes a stop token (Llama 3's end of a tool
call's message)."""


def server_tokenizer(server: Any) -> Any:
    """The tokenizer the decode scheduler hands each request: None on a server started with
    ``--skip-tokenizer-init`` (``Scheduler.init_tokenizer``: ``self.tokenizer = self.processor = None``), else a
    stand-in with the server's end-of-sequence token, an added vocabulary holding its additional stop token as
    ``<|eom_id|>`` (``get_added_vocab``), and ``additional_stop_token_ids`` as SGLang's
    ``attach_additional_stop_token_ids`` sets them from it (a set, None where there is none)."""
    if dict(server.flags).get("skip_tokenizer_init"):
        return None
    ids = tuple(getattr(server, "additional_stop_token_ids", ()))
    added = {EOM: ids[0]} if ids else {}
    return SimpleNamespace(
        eos_token_id=server.eos_token_id, additional_stop_token_ids=set(ids) or None, get_added_vocab=lambda: added
    )


def attach_release_stop_tokens(tokenizer: Any) -> None:  # pragma: no cover - conformance venv
    """The installed release's own ``attach_additional_stop_token_ids`` run on the stand-in ``tokenizer`` (as
    ``get_tokenizer`` runs it on a loaded one): the release decides its additional stop tokens from its added
    vocabulary."""
    _release_attach()(tokenizer)


@functools.cache
def _release_attach() -> Any:  # pragma: no cover - conformance venv
    """The installed release's ``attach_additional_stop_token_ids``, wherever its era keeps it (looked up once)."""
    import importlib

    for name in ("utils.hf_transformers.common", "utils.hf_transformers_utils", "hf_transformers_utils"):
        try:
            module = importlib.import_module(f"sglang.srt.{name}")
        except ImportError:
            continue
        if hasattr(module, "attach_additional_stop_token_ids"):
            return module.attach_additional_stop_token_ids
    raise ImportError("this release has no attach_additional_stop_token_ids")


def _verify_sampling(batch: Any, tokenizer: Any) -> None:  # pragma: no cover - conformance venv
    """What the tokenizer manager runs on each request's sampling parameters before a scheduler sees it, as the
    release defines it: ``normalize(tokenizer)`` (the server's tokenizer, None with ``--skip-tokenizer-init``; from
    0.5.14 it refuses what needs a tokenizer, #27882), then ``verify`` (with the vocabulary size from 0.5.x,
    without before). ``ServerRefuses`` with the release's message where it refuses one."""
    import inspect

    from pdverify.targets.protocol import ServerRefuses

    for req in batch.reqs:
        params = req.sampling_params
        verify = params.verify
        try:
            params.normalize(tokenizer)
            verify(batch.model_config.vocab_size) if inspect.signature(verify).parameters else verify()
        except ValueError as exc:
            raise ServerRefuses(f"SamplingParams.normalize/verify refuses request {req.rid!r}: {exc}") from None


def _runtime_module() -> Any:  # pragma: no cover - conformance venv
    """``sglang.srt.runtime_context`` (0.5.14 on), None before."""
    try:
        from sglang.srt import runtime_context
    except ImportError:
        return None
    return runtime_context


@functools.cache
def _runtime_context(runtime: Any, flags: Flags = ()) -> Any:  # pragma: no cover - conformance venv
    """A ``RuntimeContext`` of 0.5.15-0.5.21 with a decode scheduler's server arguments (``flags`` set, the rest
    at their defaults) projected into it by the release's own ``publish`` (0.5.17 on; it publishes into the module's
    ``_CONTEXT``, swapped for the call) or ``set_server_args`` (0.5.15-0.5.16); built once per process and flags."""
    ctx = runtime.RuntimeContext(parallel=runtime.ParallelContext())
    args = server_args("decode", flags, resolved=True)
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
