"""F10: the parallel samples of a PD generate call share one bootstrap room.

Standalone: imports only SGLang and the standard library. Runs on CPU; needs no GPU, model, tokenizer or peer.

A prefill/decode deployment pairs a request's KV transfer by its bootstrap room: the router puts the room in the
request it sends to both servers, prefill's sender and decode's receiver meet in it (the bootstrap server and the
transport's transfer tables are keyed by it), and decode aborts a request whose metadata row carries another room.
A call asking for n > 1 parallel samples (``sampling_params["n"]``, OpenAI ``n``) is expanded by the tokenizer
manager into n requests per prompt; ``GenerateReqInput``'s own normalisation gives each expanded request a room of
its own (``room + k`` for one room, 0.5.2 on), but ``TokenizerManager._handle_batch_request`` sends every sample as a
copy of the prompt's first expanded request, room included. All n samples - and the prefix-caching warm-up sent
before them - travel in one room. Per-prompt rooms (the batch form mini_lb sends) fare no better: the normalisation
repeats the list for each sample round, and the manager reads only the first round; a room per sample (the gateway's
chat form) is read only for the first sample.

Each call runs SGLang's own ``TokenizerManager.generate_request`` - ``GenerateReqInput`` and its
``normalize_batch_and_arguments``, the request states, ``_tokenize_one_request`` (validation and
``_create_tokenized_object``, which copies the room into the request sent) and ``_handle_batch_request`` - on a
manager built without its constructor (which opens sockets and loads a tokenizer), under a prefill server's
published context. Only the socket to the scheduler (it records what is sent), the wait for the scheduler's answer,
the output loop and the request logger are replaced.

Calls: (1) production-shaped - an OpenAI chat completion with ``n=4`` to a Llama-3.1-8B-Instruct PD deployment, one
random room from the router (mini_lb's chat form); (2) a batch of two prompts with ``n=2`` and a room per prompt, as
mini_lb sends a batch; (3) a chat completion with ``n=3`` and a room per sample, as sgl-model-gateway sends it; (4)
shrunk - one prompt, ``n=2``, room 1. Control: the same batch with ``n=1``, whose requests must carry the
router's rooms.

Exit 1 while the samples of a call share a room; 0 when every sample has its own (and the control passes); 2 when
the control fails (inconclusive).
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any

import sglang.srt.managers.tokenizer_manager as tm
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

VOCAB = 128256  # Llama 3.1's vocabulary
CONTEXT_LEN = 8192
HOST, PORT = "10.0.0.1", 8998
CHAT = [128000, 128006, 882, 128007, 271, 9906, 0, 128009]  # Llama 3.1's chat template around "Hello!"


class Socket:
    """The socket to the scheduler: keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_pyobj(self, obj: Any, *args: Any, **kw: Any) -> None:
        self.sent.extend(getattr(obj, "batch", None) or [obj])


class NoFeatures:
    """The manager's feature transports, with nothing to move (no multimodal inputs, no embeddings)."""

    async def prepare_for_dispatch_async(self, *args: Any, **kw: Any) -> list[Any]:
        return []

    def prepare_for_dispatch(self, *args: Any, **kw: Any) -> list[Any]:
        return []

    def cancel_for_dispatch(self, *args: Any, **kw: Any) -> None:
        return None


def manager(args: ServerArgs, socket: Socket) -> Any:
    """A prefill server's tokenizer manager with what ``generate_request`` reads, at the server's defaults."""
    m = tm.TokenizerManager.__new__(tm.TokenizerManager)
    state = {
        "server_args": args, "context_len": CONTEXT_LEN, "max_req_input_len": CONTEXT_LEN, "num_reserved_tokens": 0,
        "reserve_input_token_num": 0, "allow_auto_truncate": False, "validate_total_tokens": True,
        "is_generation": True, "is_image_gen": False, "disaggregation_mode": args.disaggregation_mode,
        "model_config": SimpleNamespace(joint_head_config=None, pointer_head=None, vocab_size=VOCAB,
                                        is_matryoshka=False, context_len=CONTEXT_LEN, is_multimodal=False,
                                        is_generation=True, hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"])),
        "preferred_sampling_params": None, "sampling_params_class": SamplingParams, "tokenizer_worker_num": 1,
        "tokenizer_ipc_name": None, "tokenizer": None, "processor": None, "mm_processor": None,
        "enable_trace": False, "enable_metrics": False, "log_requests": False, "enable_priority_scheduling": False,
        "enable_lora": False, "lora_registry": None, "rid_to_state": {}, "encoder_dispatch_ready": {},
        "logical_rid_to_child_rids": {}, "child_rid_to_logical_rid": {}, "model_update_lock": tm.RWLock(),
        "is_pause": False, "is_pause_cond": asyncio.Condition(), "send_to_scheduler": socket,
        "request_logger": SimpleNamespace(log_received_request=lambda *a, **kw: None),
        "cuda_vmm_feature_transport": NoFeatures(), "positional_embeds_transport": NoFeatures(),
    }  # fmt: skip
    for name, value in state.items():
        setattr(m, name, value)

    async def wait_one_response(obj: Any, *args: Any, **kw: Any) -> Any:
        yield {"text": "", "meta_info": {"id": obj.rid, "finish_reason": None}}

    m._wait_one_response = wait_one_response  # no scheduler answers here
    m.auto_create_handle_loop = lambda: None
    return m


def dispatch(args: ServerArgs, **body: Any) -> list[tuple[int, Any, int]]:
    """``(prompt, bootstrap_room, max_new_tokens)`` of each request the manager sends for the request ``body``."""
    socket = Socket()
    m = manager(args, socket)
    prompts = body["input_ids"] if isinstance(body["input_ids"][0], list) else [body["input_ids"]]

    async def run() -> None:
        async for _ in tm.TokenizerManager.generate_request(m, GenerateReqInput(**body), None):
            pass

    asyncio.run(run())
    return [(prompts.index(list(t.input_ids)), t.bootstrap_room, t.sampling_params.max_new_tokens) for t in socket.sent]


def sample_rooms(sent: list[tuple[int, Any, int]]) -> list[Any]:
    """The rooms of the samples (the requests that generate), in the order sent."""
    return [room for _, room, new in sent if new > 0]


def main() -> int:
    import sglang

    args = ServerArgs(model_path="dummy", device="cpu", disaggregation_mode="prefill")
    batch = {"input_ids": [[791, 1217], [9906, 11, 1917]], "bootstrap_host": [HOST, HOST],
             "bootstrap_port": [PORT, PORT], "bootstrap_room": [4242, 2**31 - 2]}  # fmt: skip
    calls = {
        "(1) production: OpenAI chat completion, n=4, one router room": {
            "input_ids": CHAT, "sampling_params": {"n": 4, "max_new_tokens": 100, "temperature": 0.7},
            "bootstrap_host": HOST, "bootstrap_port": PORT, "bootstrap_room": 7428370592110385201},
        "(2) mini_lb batch of two prompts, n=2, a room per prompt": {
            **batch, "sampling_params": {"n": 2, "max_new_tokens": 16}},
        "(3) sgl-model-gateway chat completion, n=3, a room per sample": {
            "input_ids": CHAT, "sampling_params": {"n": 3, "max_new_tokens": 100}, "bootstrap_host": [HOST] * 3,
            "bootstrap_port": [PORT] * 3, "bootstrap_room": [7428370592110385201, 4242, 2**31 - 2]},
        "(4) shrunk: one prompt, n=2, room 1": {
            "input_ids": [0], "sampling_params": {"n": 2, "max_new_tokens": 1}, "bootstrap_host": HOST,
            "bootstrap_port": PORT, "bootstrap_room": 1},
    }  # fmt: skip
    with use_context(create_context(args, role="tokenizer")):
        control = sample_rooms(dispatch(args, **batch, sampling_params={"n": 1, "max_new_tokens": 16}))
        print(f"control, the batch with n=1: rooms {control}")
        if control != [4242, 2**31 - 2]:
            print("INCONCLUSIVE: without parallel sampling the requests do not carry the router's rooms")
            return 2
        shared = []
        for name, body in calls.items():
            sent = dispatch(args, **body)
            rooms = sample_rooms(sent)
            warmups = [room for _, room, new in sent if new == 0]
            print(f"{name}: samples in rooms {rooms}; prefix-caching warm-ups in rooms {warmups}")
            if len(set(rooms)) != len(rooms):
                shared.append((name, rooms))
    if shared:
        name, rooms = shared[0]
        print(
            f"\nF10 REPRODUCED on SGLang {sglang.__version__}: a PD generate call asking for n > 1 parallel samples "
            f"sends them in shared bootstrap rooms ({name}: {rooms}). GenerateReqInput.normalize_batch_and_arguments "
            "gives each expanded request a room of its own for one router room (room + k) - and repeats a per-prompt "
            "room list for every sample round - but TokenizerManager._handle_batch_request sends each sample as a copy "
            "of its prompt's first expanded request (objs[i]), room included. A room names one KV transfer: prefill's "
            "sender and decode's receiver meet in it, so of the samples in one room one transfer pairs and the others "
            "wait out the bootstrap timeout (the client sees the request hang, then fail), or the metadata rows cross "
            "and decode aborts them as 'Context corruption'. An OpenAI chat completion with n=4 is enough."
        )
        return 1
    print(f"\nF10 not reproduced on SGLang {sglang.__version__}: every sample of a call has a room of its own.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
