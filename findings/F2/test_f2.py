"""KV checksum on a unified-memory pool digests the ids the PD transfer addresses.

On a unified-memory pool `req_to_token` and the Mamba slot mapping hold VIRTUAL
ids, while the transfer sends the translated (PHYSICAL) ids and the registered
buffers the checksum kernel reads are indexed by physical id. Both digests must
therefore read the translated ids: prefill's in `send_kv_chunk`, decode's in
`_verify_kv_checksums`.

Upstream location: test/registered/unit/disaggregation/.
"""

import unittest
from types import SimpleNamespace
from unittest.mock import Mock, patch

import numpy as np
import torch

from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.base.conn import StateType
from sglang.srt.disaggregation.decode import (
    DecodePreallocQueue,
    SchedulerDisaggregationDecodeMixin,
)
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.allocator.unified_mamba import (
    UnifiedMambaTokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.allocator.unified_sub_pool import MultiEndedAllocator
from sglang.srt.mem_cache.unified_memory_pool import (
    UnifiedHybridLinearKVPool,
    UnifiedHybridReqToTokenPool,
    UnifiedMambaSlotAllocator,
)
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

PAGE_SIZE = 64
SEQ_LEN = 300  # five pages, the last one partial
REQ_POOL_IDX = 2
VIRTUAL_PAGES = [7, 3, 12, 5, 9]
PHYSICAL_PAGES = [13, 4, 1, 10, 6]
VIRTUAL_MAMBA_SLOT = 3
PHYSICAL_MAMBA_SLOT = 6


def _v2p(pairs, num_pages):
    table = torch.full((num_pages + 1,), -1, dtype=torch.int64)
    table[0] = 0
    for virtual, physical in pairs.items():
        table[virtual] = physical
    return table


def _row(pages, page_size):
    row = torch.zeros((REQ_POOL_IDX + 1, len(pages) * page_size), dtype=torch.int32)
    row[REQ_POOL_IDX] = torch.tensor(
        [p * page_size + o for p in pages for o in range(page_size)],
        dtype=torch.int32,
    )
    return row


def _unified_mamba_pools():
    """A unified-memory hybrid-Mamba allocator and req-to-token pool holding one
    request on VIRTUAL_PAGES / VIRTUAL_MAMBA_SLOT; only the page tables are set."""
    full = MultiEndedAllocator.__new__(MultiEndedAllocator)
    full.virtual_to_physical = _v2p(dict(zip(VIRTUAL_PAGES, PHYSICAL_PAGES)), 16)
    full.pool_page_size = PAGE_SIZE
    allocator = UnifiedMambaTokenToKVPoolAllocator.__new__(
        UnifiedMambaTokenToKVPoolAllocator
    )
    allocator.page_size = PAGE_SIZE
    allocator.full_attn_allocator = full
    allocator._kvcache = UnifiedHybridLinearKVPool.__new__(UnifiedHybridLinearKVPool)

    mamba = MultiEndedAllocator.__new__(MultiEndedAllocator)
    mamba.virtual_to_physical = _v2p({VIRTUAL_MAMBA_SLOT: PHYSICAL_MAMBA_SLOT}, 8)
    slots = UnifiedMambaSlotAllocator.__new__(UnifiedMambaSlotAllocator)
    slots._multi_ended_allocator = mamba
    req_to_token_pool = UnifiedHybridReqToTokenPool.__new__(UnifiedHybridReqToTokenPool)
    req_to_token_pool.mamba_allocator = slots
    req_to_token_pool.req_to_token = _row(VIRTUAL_PAGES, PAGE_SIZE)
    mapping = torch.zeros(REQ_POOL_IDX + 1, dtype=torch.int32)
    mapping[REQ_POOL_IDX] = VIRTUAL_MAMBA_SLOT
    req_to_token_pool.req_index_to_mamba_index_mapping = mapping
    return allocator, req_to_token_pool


def _computer():
    computer = Mock()
    computer.compute.return_value = 0x1234
    return computer


def _digested(computer):
    kv, state = computer.compute.call_args.args
    return kv.tolist(), None if state is None else state.tolist()


class _FakePrefillScheduler(SchedulerDisaggregationPrefillMixin):
    def __init__(self, allocator, req_to_token_pool, state_types):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.kv_checksum_computer = _computer()
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED,
            kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=state_types)),
        )
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=Mock(), set_kv_checksum=Mock()
        )


class _FakeDecodeScheduler(SchedulerDisaggregationDecodeMixin):
    def __init__(self, allocator, req_to_token_pool):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.kv_checksum_computer = _computer()
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        self.attn_tp_cpu_group = None


def _sender():
    sender = Mock(supports_host_tensor_indices=False)
    sender.get_max_transfer_tokens.return_value = None
    sender.should_send_kv_chunk.return_value = True
    return sender


def _prefill_req(sender):
    return SimpleNamespace(
        rid="r0",
        origin_input_ids=[0] * SEQ_LEN,
        extend_end=SEQ_LEN,
        kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX),
        disagg_kv_sender=sender,
        start_send_idx=0,
        disagg_decode_prefix_len=0,
    )


def _decode_batch():
    req = SimpleNamespace(
        rid="r0",
        bootstrap_room=12345,
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX, cache_protected_len=0),
        origin_input_ids=[0] * SEQ_LEN,
        expected_kv_checksum=0x1234,
        return_logprob=False,
        output_ids=[0],  # the handoff token, as a real Req holds it after the first transfer
    )
    return SimpleNamespace(reqs=[req], filter_batch=Mock())


class TestKvChecksumUnifiedMemory(unittest.TestCase):
    def setUp(self) -> None:
        # The unified allocator's transfer translate asserts no decode CP.
        self.enterContext(get_parallel().override(attn_dcp_size=1))

    def _prefill_send(self, allocator, req_to_token_pool, state_types):
        sched = _FakePrefillScheduler(allocator, req_to_token_pool, state_types)
        sender = _sender()
        sched.send_kv_chunk(_prefill_req(sender), last_chunk=True)
        sent_pages, sent_state = sender.send.call_args.args
        return sched, [int(p) for p in sent_pages], sent_state

    def test_prefill_digests_the_pages_it_sends(self):
        allocator, req_to_token_pool = _unified_mamba_pools()
        sched, sent_pages, _ = self._prefill_send(
            allocator, req_to_token_pool, [StateType.MAMBA]
        )
        self.assertEqual(sent_pages, PHYSICAL_PAGES)
        digested_pages, _ = _digested(sched.kv_checksum_computer)
        self.assertEqual(digested_pages, sent_pages)

    def test_prefill_digests_the_mamba_slot_it_sends(self):
        allocator, req_to_token_pool = _unified_mamba_pools()
        sched, _, sent_state = self._prefill_send(
            allocator, req_to_token_pool, [StateType.MAMBA]
        )
        sent_slots = np.asarray(sent_state[0]).reshape(-1).tolist()
        self.assertEqual(sent_slots, [PHYSICAL_MAMBA_SLOT])
        _, digested_slots = _digested(sched.kv_checksum_computer)
        self.assertEqual(digested_slots, sent_slots)

    def test_decode_digests_its_transfer_destinations(self):
        allocator, req_to_token_pool = _unified_mamba_pools()
        # The destinations pop_preallocated hands prefill.
        raw = req_to_token_pool.req_to_token[REQ_POOL_IDX][:SEQ_LEN]
        dst_pages = DecodePreallocQueue._transfer_page_indices(
            None, None, allocator.translate_kv_indices_for_transfer(raw), PAGE_SIZE
        ).tolist()
        dst_slot = int(
            req_to_token_pool.translate_mamba_indices(
                req_to_token_pool.req_index_to_mamba_index_mapping[REQ_POOL_IDX]
            )
        )
        self.assertEqual(dst_pages, PHYSICAL_PAGES)

        sched = _FakeDecodeScheduler(allocator, req_to_token_pool)
        batch = _decode_batch()
        with patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags):
            sched._verify_kv_checksums(batch)
        batch.filter_batch.assert_not_called()
        self.assertEqual(
            _digested(sched.kv_checksum_computer), (dst_pages, [dst_slot])
        )

    def test_static_pool_digests_the_row_as_stored(self):
        allocator = PagedTokenToKVPoolAllocator.__new__(PagedTokenToKVPoolAllocator)
        allocator.page_size = PAGE_SIZE
        allocator._kvcache = SimpleNamespace()
        req_to_token_pool = SimpleNamespace(req_to_token=_row(PHYSICAL_PAGES, PAGE_SIZE))
        sched, sent_pages, _ = self._prefill_send(allocator, req_to_token_pool, [])
        self.assertEqual(sent_pages, PHYSICAL_PAGES)
        self.assertEqual(_digested(sched.kv_checksum_computer), (PHYSICAL_PAGES, None))


if __name__ == "__main__":
    unittest.main()
