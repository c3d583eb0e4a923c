"""F11: the stages of a pipeline-parallel PD decode server apply different outcomes to one transfer (SGLang 0.5.7-0.5.23).

Standalone: imports only sglang, torch and the standard library. Runs on CPU.

The decode PP event loop (``event_loop_pp_disagg_decode``, #14945) has the stages agree which queued transfers are done
before any stage releases one: ``_pp_pd_get_decode_transferred_ids`` (managers/scheduler_pp_mixin.py:1770-1793 on
0.5.23) intersects each stage's ``get_rids(queue, False, [KVPoll.Success, KVPoll.Failed])`` - one list, a transfer that
succeeded and one that failed alike. ``process_decode_transfer_queue`` (:1826-1844) then hands that list to
``DecodeTransferQueue.pop_transferred(rids_to_check)`` (disaggregation/decode.py:2833-2934), which polls the stage's own
receivers again: a transfer whose receiver failed on this stage is aborted here, one whose receiver succeeded here is
committed to this stage's decode batch, and the rids the first stage released are what the next stage is handed
(:507-511). When one stage's receiver of a request failed (a transfer error or timeout on the connection to that
stage's prefill peer) and another's succeeded, the stages do different things: one decodes the request, the other has
aborted it, and their decode batches no longer hold the same requests. #31869 fixed the same flattening for the
bootstrap and pre-allocation steps (0.5.17); the transfer step keeps it.

The scenario, production-shaped: Llama-3.1-70B-Instruct on a two-stage PD decode server (--pp-size 2, page size 64),
two requests in its transfer queue; the transfer of the first (room 4242) timed out on stage 1's connection and
succeeded on stage 0's, the second (room 4243) succeeded on both. The shrunk case: one request, the same split.

Runs SGLang's own ``SchedulerPPMixin`` consensus (``get_rids``, ``_pp_pd_get_decode_transferred_ids``) and step
(``process_decode_transfer_queue``) for both stages, in the loop's order (the last stage's consensus to the first
stage, the first stage's released rids to the second), over SGLang's own ``DecodeTransferQueue.pop_transferred`` with
its metadata gate, ``Req``, ``MetadataBuffers``, ``set_buf`` and ``ReqToMetadataIdxAllocator``; the polls reduce over
a one-rank gloo group. Stubbed: the KV receivers (each reports what its stage's transfer did), the stage-to-stage
send of the consensus (a Python hand-off of the object the loop sends), and the decode scheduler's fields the pass
reads (no HiCache, staging, checksum or deferred release; an output streamer that records).

Exit 1 while the two stages apply different outcomes to a request, 0 on a fixed SGLang (both stages abort the request
that failed on one of them and commit the other).
"""

from __future__ import annotations

import inspect
import sys
from array import array
from collections import deque
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist

import sglang
from sglang.srt.disaggregation import decode as decode_module
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.decode import DecodeRequest, DecodeTransferQueue
from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator
from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req
from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin
from sglang.srt.sampling.sampling_params import SamplingParams

SLOTS = 64
FIRST_TOKEN = 128006


def metadata_buffers() -> MetadataBuffers:
    kwargs: dict[str, Any] = {"hidden_size": 8192, "hidden_states_dtype": torch.bfloat16}
    if "max_sampling_mask_tokens" in inspect.signature(MetadataBuffers.__init__).parameters:
        kwargs["max_sampling_mask_tokens"] = 16
    return MetadataBuffers(SLOTS, **kwargs)


def request(rid: str, room: int, prompt: int) -> Req:
    return Req(rid, "", array("q", [(17 * t) % 128000 for t in range(prompt)]), SamplingParams(max_new_tokens=256),
               bootstrap_host="10.0.0.1", bootstrap_port=8998, bootstrap_room=room)  # fmt: skip


def receiver(poll: int) -> SimpleNamespace:
    def failure_exception() -> None:
        raise RuntimeError("KV transfer to this stage timed out")

    return SimpleNamespace(poll=lambda: poll, clear=lambda: None, failure_exception=failure_exception)


def stage(first: bool, transfers: list[tuple[str, int, int, int]]) -> SimpleNamespace:
    """One decode PP stage: its transfer queue over its own metadata rows (each request's row written by prefill's
    ``set_buf`` where its transfer succeeded here), and the scheduler fields the PP consensus and step read.
    ``transfers``: (rid, room, prompt tokens, this stage's poll)."""
    rows = metadata_buffers()
    entries = []
    for slot, (rid, room, prompt, poll) in enumerate(transfers):
        req = request(rid, room, prompt)
        if poll == KVPoll.Success:  # the receiver succeeds once the KV and prefill's metadata row landed
            written = request(rid, room, prompt)
            written.output_ids, written.metadata_buffer_index = [FIRST_TOKEN], slot
            rows.set_buf(written)
        entries.append(DecodeRequest(req=req, kv_receiver=receiver(poll), metadata_buffer_index=slot))
    streamed: list[str] = []
    streamer = SimpleNamespace(stream_output=lambda reqs, *a, **kw: streamed.extend(r.rid for r in reqs))
    tree_cache = SimpleNamespace(cache_finished_req=lambda *a, **kw: None, unlock=lambda *a, **kw: None,
                                 finish=lambda *a, **kw: None)  # fmt: skip
    scheduler = SimpleNamespace(
        enable_decode_hicache=False, enable_hisparse=False, kv_checksum_computer=None, tree_cache=tree_cache,
        output_streamer=streamer, stream_output=streamer.stream_output, tp_rank=0, enable_metrics=False,
        batch_result_processor=SimpleNamespace(_maybe_update_reasoning_tokens=lambda *a, **kw: None),
        metrics_reporter=SimpleNamespace(enable_metrics=False), spec_algorithm=SimpleNamespace(is_none=lambda: True),
        server_args=SimpleNamespace(disaggregation_transfer_backend="mooncake", disaggregation_mode="decode"),
    )  # fmt: skip
    queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
    queue.queue, queue.metadata_buffers, queue.scheduler, queue.tree_cache = entries, rows, scheduler, tree_cache
    queue.gloo_group, queue.tp_rank, queue.spec_algorithm = dist.group.WORLD, 0, scheduler.spec_algorithm
    queue.enable_staging = queue.enable_host_receive = queue.enable_deferred_kv_release = False
    queue._skipped_checksum_signatures, queue._deferred_releases = set(), []
    allocator = ReqToMetadataIdxAllocator(SLOTS)
    allocator.free_slots = deque(range(len(transfers), SLOTS))  # each request holds its slot
    queue.req_to_metadata_buffer_idx_allocator = allocator
    pp = SimpleNamespace(
        disagg_decode_transfer_queue=queue, waiting_queue=[], enable_hisparse=False,
        attn_cp_cpu_group=dist.group.WORLD, attn_tp_cpu_group=dist.group.WORLD,
        tp_worker=SimpleNamespace(get_attention_tp_cpu_group=lambda: dist.group.WORLD),  # 0.5.7-0.5.8.post1 read it
        pp_group=SimpleNamespace(is_first_rank=first, is_last_rank=not first), inbox=[],
    )  # fmt: skip
    pp.get_rids = lambda *a: SchedulerPPMixin.get_rids(pp, *a)
    pp._pp_recv_pyobj_from_prev_stage = lambda: pp.inbox.pop(0)
    return pp


def outcome(pp: SimpleNamespace, rid: str) -> str:
    if any(r.rid == rid for r in pp.waiting_queue):
        return "committed (decoded in this stage's batch)"
    entry = next(e for e in pp.disagg_decode_transfer_queue.queue if e.req.rid == rid) if any(
        e.req.rid == rid for e in pp.disagg_decode_transfer_queue.queue) else None  # fmt: skip
    return "still queued" if entry is not None else "aborted"


def run(transfers: list[tuple[str, int, int, tuple[int, int]]]) -> list[tuple[str, str, str]]:
    """Both stages' consensus and transfer step, in the PP loop's order; each request's outcome on stage 0 and 1."""
    stages = [stage(s == 0, [(rid, room, prompt, polls[s]) for rid, room, prompt, polls in transfers]) for s in (0, 1)]
    # the consensus travels stage 0 -> stage 1 (the last), which hands it back to stage 0 as the release rids
    first = SchedulerPPMixin._pp_pd_get_decode_transferred_ids(stages[0])
    stages[1].inbox.append(first)
    agreed = SchedulerPPMixin._pp_pd_get_decode_transferred_ids(stages[1])
    with mock.patch.object(decode_module, "release_kv_cache", lambda *a, **kw: None, create=True):
        released = SchedulerPPMixin.process_decode_transfer_queue(stages[0], agreed)
        SchedulerPPMixin.process_decode_transfer_queue(stages[1], released)  # stage 0's released rids, forwarded
    return [(rid, outcome(stages[0], rid), outcome(stages[1], rid)) for rid, *_ in transfers]


OK, FAILED = KVPoll.Success, KVPoll.Failed
CASES = (
    ("Llama-3.1-70B-Instruct, --pp-size 2: two requests; the first's transfer timed out on stage 1's connection",
     [("req-4242", 4242, 1800, (OK, FAILED)), ("req-4243", 4243, 600, (OK, OK))]),
    ("shrunk: one request, succeeded on stage 0, failed on stage 1", [("r0", 1, 1, (OK, FAILED))]),
)  # fmt: skip


def main() -> int:
    if not hasattr(SchedulerPPMixin, "_pp_pd_get_decode_transferred_ids"):
        print(f"F11 not applicable on SGLang {sglang.__version__}: no decode PP event loop (it came in 0.5.7, #14945).")
        return 0
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    lines, diverged = [], False
    for name, transfers in CASES:
        lines.append(f"  {name}:")
        for rid, on0, on1 in run(transfers):
            diverged |= on0 != on1
            lines.append(f"    {rid}: stage 0 {on0}; stage 1 {on1}{'  <- the stages diverge' if on0 != on1 else ''}")
    if diverged:
        print(
            f"F11 REPRODUCED on SGLang {sglang.__version__}: the decode PP stages agree which transfers are done "
            "without saying which failed, and each stage's pass polls its own receivers again - a request whose "
            "transfer failed on one stage and succeeded on another is decoded by one stage and aborted by the other, "
            "so the stages' decode batches diverge. Cases:"
        )
        print("\n".join(lines))
        return 1
    print(f"F11 not reproduced on SGLang {sglang.__version__}: both stages apply one outcome to every request.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
