"""PP consensus for decode's transfer queue.

With --pp-size > 1 the decode stages agree which queued transfers are done
before any stage releases one (`_pp_pd_get_decode_transferred_ids`). The
consensus listed the rids every stage had finished, succeeded or failed alike,
and each stage's `pop_transferred` polled its own receivers again: a transfer
that failed on one stage and succeeded on another was aborted on the first and
committed to the decode batch on the second, so the stages' batches diverged.
The consensus now says which transfers succeeded on every stage (good) and
which failed on some stage (bad), and `pop_transferred` applies it.

Upstream location: test/registered/unit/disaggregation/test_pp_transfer_consensus.py.
"""

import unittest
from array import array
from collections import deque
from types import SimpleNamespace
from unittest import mock

import torch
import torch.distributed as dist

from sglang.srt.disaggregation import decode as decode_module
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.decode import DecodeRequest, DecodeTransferQueue
from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=3, suite="base-a-test-cpu")

SLOTS = 8
FIRST_TOKEN = 31337


def _req(rid, room):
    return Req(
        rid,
        "",
        array("q", [1, 2, 3]),
        SamplingParams(max_new_tokens=8),
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        bootstrap_room=room,
    )


def _receiver(poll):
    def failure_exception():
        raise RuntimeError("KV transfer failed on this stage")

    return SimpleNamespace(
        poll=lambda: poll, clear=lambda: None, failure_exception=failure_exception
    )


def _stage(first, polls):
    """A decode PP stage whose transfer queue holds one request per poll (rid
    `r<i>`, room i + 1, slot i), each row written where its transfer succeeded."""
    rows = MetadataBuffers(
        SLOTS,
        hidden_size=16,
        hidden_states_dtype=torch.bfloat16,
        max_sampling_mask_tokens=16,
    )
    entries = []
    for i, poll in enumerate(polls):
        if poll == KVPoll.Success:
            written = _req(f"r{i}", i + 1)
            written.output_ids = [FIRST_TOKEN]
            written.metadata_buffer_index = i
            rows.set_buf(written)
        entries.append(
            DecodeRequest(
                req=_req(f"r{i}", i + 1),
                kv_receiver=_receiver(poll),
                metadata_buffer_index=i,
            )
        )
    tree_cache = SimpleNamespace(
        cache_finished_req=lambda *a, **kw: None,
        unlock=lambda *a, **kw: None,
        finish=lambda *a, **kw: None,
    )
    queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
    queue.queue = entries
    queue.metadata_buffers = rows
    queue.gloo_group = dist.group.WORLD
    queue.enable_staging = False
    queue.enable_host_receive = False
    queue.enable_deferred_kv_release = False
    queue.tp_rank = 0
    queue.tree_cache = tree_cache
    queue.spec_algorithm = SimpleNamespace(is_none=lambda: True)
    queue._skipped_checksum_signatures = set()
    queue._deferred_releases = []
    allocator = ReqToMetadataIdxAllocator(SLOTS)
    allocator.free_slots = deque(range(len(polls), SLOTS))
    queue.req_to_metadata_buffer_idx_allocator = allocator
    queue.scheduler = SimpleNamespace(
        enable_decode_hicache=False,
        enable_hisparse=False,
        kv_checksum_computer=None,
        tree_cache=tree_cache,
        enable_metrics=False,
        tp_rank=0,
        output_streamer=SimpleNamespace(stream_output=lambda *a, **kw: None),
        batch_result_processor=SimpleNamespace(
            _maybe_update_reasoning_tokens=lambda *a, **kw: None
        ),
        metrics_reporter=SimpleNamespace(enable_metrics=False),
        spec_algorithm=queue.spec_algorithm,
        server_args=SimpleNamespace(
            disaggregation_transfer_backend="mooncake", disaggregation_mode="decode"
        ),
    )
    stage = SimpleNamespace(
        disagg_decode_transfer_queue=queue,
        waiting_queue=[],
        enable_hisparse=False,
        attn_cp_cpu_group=dist.group.WORLD,
        attn_tp_cpu_group=dist.group.WORLD,
        pp_group=SimpleNamespace(is_first_rank=first, is_last_rank=not first),
        inbox=[],
    )
    stage.get_rids = lambda *a: SchedulerPPMixin.get_rids(stage, *a)
    stage._pp_recv_pyobj_from_prev_stage = lambda: stage.inbox.pop(0)
    return stage


def _outcomes(stage, count):
    waiting = {r.rid for r in stage.waiting_queue}
    queued = {e.req.rid for e in stage.disagg_decode_transfer_queue.queue}
    return [
        "committed" if rid in waiting else "queued" if rid in queued else "aborted"
        for rid in (f"r{i}" for i in range(count))
    ]


class TestPPTransferConsensus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not dist.is_initialized():
            dist.init_process_group(
                "gloo", store=dist.HashStore(), rank=0, world_size=1
            )

    def _run(self, polls_stage0, polls_stage1):
        stages = [_stage(True, polls_stage0), _stage(False, polls_stage1)]
        consensus = SchedulerPPMixin._pp_pd_get_decode_transferred_ids(stages[0])
        stages[1].inbox.append(consensus)
        consensus = SchedulerPPMixin._pp_pd_get_decode_transferred_ids(stages[1])
        with mock.patch.object(
            decode_module, "release_kv_cache", lambda *a, **kw: None, create=True
        ):
            released = SchedulerPPMixin.process_decode_transfer_queue(
                stages[0], consensus
            )
            SchedulerPPMixin.process_decode_transfer_queue(stages[1], released)
        return [_outcomes(stage, len(polls_stage0)) for stage in stages]

    def test_failure_on_one_stage_aborts_on_every_stage(self):
        ok, failed = KVPoll.Success, KVPoll.Failed
        stage0, stage1 = self._run([ok, ok], [failed, ok])
        self.assertEqual(stage0, ["aborted", "committed"])
        self.assertEqual(stage1, ["aborted", "committed"])

    def test_failure_on_the_first_stage_aborts_on_every_stage(self):
        ok, failed = KVPoll.Success, KVPoll.Failed
        stage0, stage1 = self._run([failed], [ok])
        self.assertEqual(stage0, ["aborted"])
        self.assertEqual(stage1, ["aborted"])

    def test_transfer_in_flight_on_one_stage_stays_queued(self):
        ok, flight = KVPoll.Success, KVPoll.Transferring
        stage0, stage1 = self._run([ok], [flight])
        self.assertEqual(stage0, ["queued"])
        self.assertEqual(stage1, ["queued"])


if __name__ == "__main__":
    unittest.main()
