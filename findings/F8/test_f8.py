"""Decode's metadata gate and a request in bootstrap room 0.

Prefill writes each request's first token and bootstrap room into the
request's metadata row and sends the row to decode with the KV. Decode's
metadata gate (`_apply_metadata_gate`) keeps a finished transfer at
`Transferring` until the row has landed, and read a room of 0 as "not yet
written". Room 0 is a valid room (routers draw it; nothing refuses it), so a
request in room 0 stayed in the transfer queue for ever. The row now carries a
written mark; a row that was never written (or cleared with `clear_slot`) is
still held.

Upstream location: test/registered/unit/disaggregation/test_metadata_gate.py.
"""

import ctypes
import unittest
from array import array
from collections import deque
from types import SimpleNamespace

import torch
import torch.distributed as dist

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.decode import DecodeRequest, DecodeTransferQueue
from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager
from sglang.srt.disaggregation.utils import (
    MetadataBuffers,
    ReqToMetadataIdxAllocator,
    _apply_metadata_gate,
)
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=3, suite="base-a-test-cpu")

SLOTS = 8
FIRST_TOKEN = 31337


def _buffers():
    return MetadataBuffers(
        SLOTS,
        hidden_size=16,
        hidden_states_dtype=torch.bfloat16,
        max_sampling_mask_tokens=16,
    )


def _req(room, slot=-1):
    req = Req(
        "rid-0",
        "",
        array("q", [1, 2, 3]),
        SamplingParams(max_new_tokens=8),
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        bootstrap_room=room,
    )
    req.output_ids = [FIRST_TOKEN]
    req.metadata_buffer_index = slot
    return req


def _send_aux(prefill, decode, source, destination):
    ptrs, _, item_lens = prefill.get_buf_infos()
    dst_ptrs, _, _ = decode.get_buf_infos()

    def transfer(session, blocks):
        for src, dst, length in blocks:
            ctypes.memmove(dst, src, length)
        return 0

    manager = SimpleNamespace(
        kv_args=SimpleNamespace(aux_data_ptrs=ptrs, aux_item_lens=item_lens),
        enable_custom_mem_pool=False,
        custom_mem_pool_type=None,
        _transfer_data=transfer,
    )
    info = SimpleNamespace(dst_aux_index=destination, mooncake_session_id="s")
    MooncakeKVManager.send_aux(manager, info, source, dst_ptrs)


class TestMetadataGateRoomZero(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not dist.is_initialized():
            dist.init_process_group(
                "gloo", store=dist.HashStore(), rank=0, world_size=1
            )

    def _gate(self, buffers, room, slot):
        polls = [int(KVPoll.Success)]
        decode_req = SimpleNamespace(req=_req(room), metadata_buffer_index=slot)
        _apply_metadata_gate(polls, [decode_req], buffers)
        return polls[0]

    def test_written_row_passes_the_gate_in_every_room(self):
        for room in (0, 1, 2**31 - 2, 2**63 - 1):
            with self.subTest(room=room):
                buffers = _buffers()
                buffers.set_buf(_req(room, slot=3))
                self.assertEqual(self._gate(buffers, room, 3), int(KVPoll.Success))

    def test_unwritten_or_cleared_row_is_held(self):
        buffers = _buffers()
        self.assertEqual(self._gate(buffers, 5, 3), int(KVPoll.Transferring))
        buffers.set_buf(_req(5, slot=3))
        buffers.clear_slot(3)
        self.assertEqual(self._gate(buffers, 5, 3), int(KVPoll.Transferring))

    def test_room_zero_request_is_committed(self):
        for room in (0, 7):
            with self.subTest(room=room):
                prefill, decode = _buffers(), _buffers()
                prefill.set_buf(_req(room, slot=2))
                _send_aux(prefill, decode, 2, 5)

                receiver = SimpleNamespace(poll=lambda: KVPoll.Success, clear=lambda: None)
                queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
                queue.queue = [
                    DecodeRequest(
                        req=_req(room), kv_receiver=receiver, metadata_buffer_index=5
                    )
                ]
                queue.metadata_buffers = decode
                queue.gloo_group = dist.group.WORLD
                queue.enable_staging = False
                queue.enable_host_receive = False
                queue.enable_deferred_kv_release = False
                queue.tp_rank = 0
                queue.spec_algorithm = SimpleNamespace(is_none=lambda: True)
                allocator = ReqToMetadataIdxAllocator(SLOTS)
                allocator.free_slots = deque(i for i in range(SLOTS) if i != 5)
                queue.req_to_metadata_buffer_idx_allocator = allocator
                queue.scheduler = SimpleNamespace(
                    enable_decode_hicache=False,
                    enable_hisparse=False,
                    kv_checksum_computer=None,
                    output_streamer=SimpleNamespace(stream_output=lambda *a: None),
                    batch_result_processor=SimpleNamespace(
                        _maybe_update_reasoning_tokens=lambda *a: None
                    ),
                    metrics_reporter=SimpleNamespace(enable_metrics=False),
                )

                done = queue.pop_transferred()
                self.assertEqual([r.rid for r in done], ["rid-0"])
                self.assertEqual(done[0].output_ids[-1], FIRST_TOKEN)
                self.assertEqual(queue.queue, [])
                self.assertIn(5, allocator.free_slots)


if __name__ == "__main__":
    unittest.main()
