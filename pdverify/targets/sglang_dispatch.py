"""The ``generate_dispatch`` unit on a released SGLang: the release's own ``TokenizerManager.generate_request`` on one
``GenerateCall`` - ``GenerateReqInput`` and its ``normalize_batch_and_arguments`` (the bootstrap fields' expansion),
the request states, ``_tokenize_one_request`` (validation, ``_create_tokenized_object``: the tokenized request and
its bootstrap room), and for a batch or parallel samples ``_handle_batch_request`` (the prefix-caching warm-ups, the
samples) - every release whose requests carry a bootstrap room (0.4.5.post1 on).

The manager is built with ``__new__`` (its constructor opens ZMQ sockets, loads a tokenizer and the model's
configuration) and holds the prefill server's arguments - through the constructor where the release builds them
(``sglang_context.server_args``), under its published configuration (``server_published``) - the model's vocabulary
and context length, no tokenizer (the prompts are token ids) and no multimodal processor. Stubbed: the socket to the
scheduler (``send_to_scheduler``: records each request sent, the one output of the unit), the wait for the
scheduler's answer (``_wait_one_response``: one empty response at once; no scheduler runs), the loop that reads the
scheduler's output (``auto_create_handle_loop``), the request logger, and 0.5.23's feature transports (CUDA VMM,
positional embeddings: used by requests carrying features or embeddings only, none here).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import traceback
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from pdverify.model.dispatch import Dispatched, DispatchTrace, GenerateCall
from pdverify.model.transfer_queue import VOCAB

CONTEXT_LEN = 8192
"""The model's context length (Llama-3.1-8B served with ``--context-length 8192``)."""
BOOTSTRAP_HOST = "10.0.0.1"
BOOTSTRAP_PORT = 8998


class _Socket:
    """The socket to the scheduler: records what is sent (one request, or a batch of them)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_pyobj(self, obj: Any, *args: Any, **kw: Any) -> None:
        self.sent.extend(getattr(obj, "batch", None) or [obj])

    def send(self, data: Any, *args: Any, **kw: Any) -> None:  # pragma: no cover - conformance venv
        """A msgpack-encoded request (``sock_send`` without pickle IPC), decoded by SGLang's own reader."""
        from sglang.srt.managers.io_struct import msgpack_decode

        self.send_pyobj(msgpack_decode(data))


class _NoFeatures:
    """0.5.23's feature transports (CUDA VMM, positional embeddings) with nothing to move: no request here carries
    multimodal features or embeddings."""

    async def prepare_for_dispatch_async(self, *args: Any, **kw: Any) -> list[Any]:
        return []

    def prepare_for_dispatch(self, *args: Any, **kw: Any) -> list[Any]:
        return []

    def cancel_for_dispatch(self, *args: Any, **kw: Any) -> None:
        return None


ATTENTION_DP = (("enable_dp_attention", True), ("dp_size", 2), ("tp_size", 2))
"""A prefill server with attention data parallelism: two attention DP ranks over two TP ranks."""


def tokenizer_manager_shell(cls: Any, flags: Any = ()) -> Any:  # pragma: no cover - conformance venv
    """A prefill server's tokenizer manager of the release's class ``cls``, built with ``__new__`` (its constructor
    opens ZMQ sockets and loads a tokenizer) and given the state ``generate_request`` and the request validation
    read, at the server's defaults (but ``flags``, pairs of a server argument and its value): the model's vocabulary and
    context length, the server's arguments (through the constructor where SGLang publishes them), no tokenizer, a text
    model's processor."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    from pdverify.targets.sglang_context import builds_server_args, server_args

    tm = importlib.import_module(cls.__module__)
    manager = cls.__new__(cls)
    model = SimpleNamespace(joint_head_config=None, pointer_head=None, vocab_size=VOCAB, is_matryoshka=False,
                            context_len=CONTEXT_LEN, is_multimodal=False, is_generation=True,
                            hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"]))  # fmt: skip
    args = server_args("prefill", tuple(flags), resolved=builds_server_args())
    state: dict[str, Any] = {
        # the server's and the model's configuration
        "server_args": args, "model_config": model, "context_len": CONTEXT_LEN, "max_req_input_len": CONTEXT_LEN,
        "num_reserved_tokens": 0, "reserve_input_token_num": 0, "allow_auto_truncate": False,
        "validate_total_tokens": True, "is_generation": True, "is_image_gen": False,
        "disaggregation_mode": getattr(args, "disaggregation_mode", "prefill"), "preferred_sampling_params": None,
        "sampling_params_class": SamplingParams, "tokenizer_worker_num": 1, "tokenizer_ipc_name": None,
        "dump_requests_folder": "", "crash_dump_folder": None, "server_status": None,
        # the switches generate_request reads, at the server's defaults
        "enable_trace": False, "enable_metrics": False, "log_requests": False, "enable_priority_scheduling": False,
        "enable_lora": False, "lora_registry": None,
        # no tokenizer (the prompts are ids); a text model's processor: none, or the release's dummy one where it
        # calls it unconditionally (to 0.4.5.post3)
        "tokenizer": None, "processor": None,
        "mm_processor": tm.get_dummy_processor() if hasattr(tm, "get_dummy_processor") else None,
        # the request states and the gates, as the constructor leaves them (each release reads its own names)
        "rid_to_state": {}, "encoder_dispatch_ready": {}, "req_state_class": getattr(tm, "ReqState", None),
        "logical_rid_to_child_rids": {}, "child_rid_to_logical_rid": {}, "model_update_lock": tm.RWLock(),
        "is_pause": False, "is_pause_cond": asyncio.Condition(), "_updating": False, "_cond": asyncio.Condition(),
        "_is_updating": False, "_is_updating_cond": asyncio.Condition(),
    }  # fmt: skip
    for name, value in state.items():
        setattr(manager, name, value)
    return manager


def _manager(tm: Any, socket: _Socket, flags: Any) -> Any:  # pragma: no cover - conformance venv
    """The shell (``tokenizer_manager_shell``, the server started with ``flags``) with the stubs: the scheduler
    socket, the request logger, the feature transports, the response wait and the output loop."""
    manager = tokenizer_manager_shell(tm.TokenizerManager, flags)
    stubs = {"send_to_scheduler": socket, "request_logger": SimpleNamespace(log_received_request=lambda *a, **kw: None),
             "cuda_vmm_feature_transport": _NoFeatures(), "positional_embeds_transport": _NoFeatures()}  # fmt: skip
    for name, value in stubs.items():
        setattr(manager, name, value)

    async def wait_one_response(obj: Any, *args: Any, **kw: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"text": "", "meta_info": {"id": obj.rid, "finish_reason": None}}

    manager._wait_one_response = wait_one_response
    manager.auto_create_handle_loop = lambda: None
    return manager


def _fields(call: GenerateCall, declared: set[str]) -> dict[str, Any]:
    """The request body the router sends: the prompts, ``n``, ``stream`` and the bootstrap fields - with a room per
    prompt (``mini_lb``'s batch form) or per sample (``sgl-model-gateway``'s chat form), a host and a port each too,
    else one of each - those of them the release's ``GenerateReqInput`` declares (``declared``: 0.4.5.post1-0.4.5.post2
    have no port field)."""
    ids: Any = list(call.prompts[0]) if call.single else [list(p) for p in call.prompts]
    listed = len(call.room) if isinstance(call.room, tuple) else 0  # a room per prompt, or per sample
    room: Any = list(call.room) if isinstance(call.room, tuple) else call.room
    body = {"input_ids": ids, "sampling_params": {"n": call.n, "max_new_tokens": call.max_new_tokens},
            "stream": call.stream,
            "bootstrap_host": [BOOTSTRAP_HOST] * listed if listed else BOOTSTRAP_HOST,
            "bootstrap_port": [BOOTSTRAP_PORT] * listed if listed else BOOTSTRAP_PORT,
            "bootstrap_room": room}  # fmt: skip
    return {k: v for k, v in body.items() if k in declared}


def raised(e: BaseException) -> str:
    """An exception out of SGLang's code as a verdict: its type, message and where in SGLang it was raised."""
    where = traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__}: {e} (at {where.filename.rsplit('/sglang/', 1)[-1]}:{where.lineno})"


def sglang_generate_dispatch(call: GenerateCall, device: str) -> DispatchTrace:  # pragma: no cover - conformance venv
    """What the installed release's tokenizer manager sends the scheduler for ``call`` (host-side: ``device`` is not
    read)."""
    import sglang.srt.managers.tokenizer_manager as tm
    from sglang.srt.managers.io_struct import GenerateReqInput

    from pdverify.targets.sglang_context import server_published

    flags = ATTENTION_DP if call.attention_dp else ()
    socket = _Socket()
    manager = _manager(tm, socket, flags)

    async def dispatch() -> None:
        obj = GenerateReqInput(**_fields(call, {f.name for f in dataclasses.fields(GenerateReqInput)}))
        async for _ in tm.TokenizerManager.generate_request(manager, obj, None):
            pass

    scope = server_published("prefill", flags)
    verdict = ""
    try:
        with scope if scope is not None else contextlib.nullcontext():
            asyncio.run(dispatch())
    except Exception as e:  # the client gets an error: what was sent before it still runs
        verdict = raised(e)
    sent = []
    for tokenized in socket.sent:
        ids = tuple(tokenized.input_ids)
        if ids not in call.prompts:
            raise AssertionError(f"the manager sent a request of prompt {list(ids)}, not one of the call's")
        sent.append(Dispatched(prompt=call.prompts.index(ids), room=tokenized.bootstrap_room,
                               max_new_tokens=tokenized.sampling_params.max_new_tokens))  # fmt: skip
    return DispatchTrace(sent=tuple(sent), raised=verdict)
