"""F8: a PD request whose bootstrap room is 0 never leaves decode's transfer queue (SGLang 0.5.9-0.5.23).

Standalone: imports only sglang, torch and the standard library. Runs on CPU.

Prefill writes each request's first output token and its ``bootstrap_room`` into the request's row of the metadata
buffers (``MetadataBuffers.set_buf``, disaggregation/utils.py:670-673) and sends the row to decode's slot with the KV
(``MooncakeKVManager.send_aux``). Decode reads a row whose room is 0 as "prefill has not written it yet": the
metadata gate keeps the request's poll at ``Transferring`` (``_apply_metadata_gate``, utils.py:245-260, called by
``DecodeTransferQueue._poll_with_metadata_gate``), and ``_commit_transfer_to_req`` aborts such a row if it ever got
that far (decode.py:2636). But 0 is a room like any other: nothing refuses it (``GenerateReqInput.bootstrap_room`` is
any int), and the routers draw it - the gRPC PD router from ``[0, 2**31 - 1)``, the HTTP one from ``[0, 2**63)``. So a
request in room 0 stays in decode's transfer queue for ever: its client hangs, and its KV pages and metadata slot are
never freed (no timeout applies once the receiver reports the transfer done).

The scenario, production-shaped: a Llama-3.1-8B-Instruct PD deployment behind the gRPC PD router, one request of 900
tokens whose room came out 0 (one request in 2**31 - 1); prefill's metadata slot 23, decode's 5 (of 64). Decode's
receiver reports the transfer done, prefill's row has landed in decode's slot, and ``pop_transferred`` is polled 8
times: the request is still queued. The control: the same request in room 1 (and 2**31 - 2, 2**63 - 1) leaves at the
first poll with prefill's first token. The shrunk case follows: room 0, slot 0 on both sides.

Runs SGLang's own ``Req``, ``MetadataBuffers`` (both sides, CPU-resident by design), ``set_buf``,
``MooncakeKVManager.send_aux`` (its address arithmetic; the transfer engine is a byte copy of each block, as
Mooncake's ``batch_transfer_sync`` writes), ``ReqToMetadataIdxAllocator``, ``DecodeTransferQueue.pop_transferred``
with its metadata gate and ``poll_and_all_reduce`` over a one-rank gloo group. Stubbed: decode's KV receiver (it
reports the transfer done, as Mooncake's does once every chunk and the aux row landed) and the decode scheduler's
fields the successful path reads (no HiCache, no staging, no checksum, an output streamer that records).

Exit 1 while a request in room 0 is never committed and one in another room is, 0 on a fixed SGLang (every room
commits).
"""

from __future__ import annotations

import ctypes
import inspect
import sys
from array import array
from collections import deque
from types import SimpleNamespace

import torch
import torch.distributed as dist

import sglang
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.decode import DecodeRequest, DecodeTransferQueue
from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager
from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams

SLOTS = 64  # --max-running-requests' worth of metadata rows on each side
FIRST_TOKEN = 128006  # the first token prefill sampled (Llama 3's <|start_header_id|>)
POLLS = 8


def metadata_buffers() -> MetadataBuffers:
    """One side's metadata buffers, as the disaggregation queues build them (hidden states of Llama-3.1-8B)."""
    kwargs = {"hidden_size": 4096, "hidden_states_dtype": torch.bfloat16}
    if "max_sampling_mask_tokens" in inspect.signature(MetadataBuffers.__init__).parameters:
        kwargs["max_sampling_mask_tokens"] = 16
    return MetadataBuffers(SLOTS, **kwargs)


def request(room: int, prompt: int) -> Req:
    return Req("client-0", "", array("q", [(17 * t) % 128000 for t in range(prompt)]),
               SamplingParams(max_new_tokens=256), bootstrap_host="10.0.0.1", bootstrap_port=8998,
               bootstrap_room=room)  # fmt: skip


def send_aux(prefill: MetadataBuffers, decode: MetadataBuffers, source: int, destination: int) -> None:
    """Prefill's aux transfer of the request's row: SGLang's own ``send_aux`` address arithmetic, a byte copy per
    block for the transfer engine."""
    ptrs, _, item_lens = prefill.get_buf_infos()
    dst_ptrs, _, _ = decode.get_buf_infos()

    def transfer(session: object, blocks: list[tuple[int, int, int]]) -> int:
        for src, dst, length in blocks:
            ctypes.memmove(dst, src, length)
        return 0

    manager = SimpleNamespace(kv_args=SimpleNamespace(aux_data_ptrs=ptrs, aux_item_lens=item_lens),
                              enable_custom_mem_pool=False, custom_mem_pool_type=None, _transfer_data=transfer)  # fmt: skip
    info = SimpleNamespace(dst_aux_index=destination, mooncake_session_id="session")
    assert MooncakeKVManager.send_aux(manager, info, source, dst_ptrs) == 0


def handoff(room: int, prompt: int, prefill_slot: int, decode_slot: int) -> str | None:
    """One request's handoff: None if decode's transfer queue committed it with prefill's first token within
    ``POLLS`` polls, else what happened instead."""
    prefill_rows, decode_rows = metadata_buffers(), metadata_buffers()

    # prefill: the last chunk's set_buf, then the aux transfer beside the KV
    preq = request(room, prompt)
    preq.output_ids = [FIRST_TOKEN]
    preq.metadata_buffer_index = prefill_slot
    prefill_rows.set_buf(preq)
    send_aux(prefill_rows, decode_rows, prefill_slot, decode_slot)

    # decode: the transfer queue, the request's receiver reporting the transfer done
    dreq = request(room, prompt)
    receiver = SimpleNamespace(poll=lambda: KVPoll.Success, clear=lambda: None)
    queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
    queue.queue = [DecodeRequest(req=dreq, kv_receiver=receiver, metadata_buffer_index=decode_slot)]
    queue.metadata_buffers = decode_rows
    queue.gloo_group = dist.group.WORLD
    queue.enable_staging = queue.enable_host_receive = queue.enable_deferred_kv_release = False
    queue.tp_rank = 0
    queue.spec_algorithm = SimpleNamespace(is_none=lambda: True)
    allocator = ReqToMetadataIdxAllocator(SLOTS)
    allocator.free_slots = deque(i for i in range(SLOTS) if i != decode_slot)  # the request holds its slot
    queue.req_to_metadata_buffer_idx_allocator = allocator
    streamed: list[str] = []
    queue.scheduler = SimpleNamespace(
        enable_decode_hicache=False, enable_hisparse=False, kv_checksum_computer=None,
        output_streamer=SimpleNamespace(stream_output=lambda reqs, *a: streamed.extend(r.rid for r in reqs)),
        stream_output=lambda reqs, *a: streamed.extend(r.rid for r in reqs),
        batch_result_processor=SimpleNamespace(_maybe_update_reasoning_tokens=lambda *a: None),
        metrics_reporter=SimpleNamespace(enable_metrics=False),
        # the decode server's arguments, which 0.5.13-0.5.18's gate reads (fake transfer or not)
        server_args=SimpleNamespace(disaggregation_transfer_backend="mooncake", disaggregation_mode="decode"),
    )  # fmt: skip
    for poll in range(POLLS):
        done = queue.pop_transferred()
        if done:
            token = int(done[0].output_ids[-1])
            return None if token == FIRST_TOKEN else f"committed with first token {token}, prefill sampled {FIRST_TOKEN}"
        if not queue.queue:
            return f"aborted at poll {poll}: {getattr(dreq.finished_reason, 'message', dreq.finished_reason)}"
    row = [int(v) for v in decode_rows.bootstrap_room[decode_slot, :2].tolist()]
    return (
        f"still in the transfer queue after {POLLS} polls (receiver: transfer done; decode's row {decode_slot} holds "
        f"room {row[0]}, as prefill wrote it); its KV pages and metadata slot stay held"
    )


CASES = (
    ("Llama-3.1-8B-Instruct behind the gRPC PD router, a 900-token request in room 0 (prefill slot 23, decode 5)",
     0, 900, 23, 5),
    ("the same request in room 1", 1, 900, 23, 5),
    ("in room 2**31 - 2 (the gRPC router's last)", 2**31 - 2, 900, 23, 5),
    ("in room 2**63 - 1", 2**63 - 1, 900, 23, 5),
    ("shrunk: a 1-token request in room 0, slot 0 on both sides", 0, 1, 0, 0),
)  # fmt: skip


def main() -> int:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    outcomes = [(name, room, handoff(room, prompt, p, d)) for name, room, prompt, p, d in CASES]
    stuck = [name for name, room, why in outcomes if why is not None and room == 0]
    others = [name for name, room, why in outcomes if why is not None and room != 0]
    done = "committed with prefill's first token"
    lines = [f"  {name}: {why or done}" for name, _, why in outcomes]
    if others:
        print(f"F8 check inconclusive on SGLang {sglang.__version__}: a request in another room was not committed.")
        print("\n".join(lines))
        return 2
    if stuck:
        print(
            f"F8 REPRODUCED on SGLang {sglang.__version__}: decode reads a metadata row whose bootstrap_room is 0 as "
            "'prefill has not written it yet' (the metadata gate keeps the poll at Transferring), so a transferred "
            "request in room 0 - a room every router may draw - never leaves the transfer queue: its client hangs and "
            "its KV pages and metadata slot are never freed. Cases:"
        )
        print("\n".join(lines))
        return 1
    print(f"F8 not reproduced on SGLang {sglang.__version__}: every room commits.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
