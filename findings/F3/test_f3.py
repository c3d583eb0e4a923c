"""KV checksum of a PD-rebootstrapped request covers what prefill recomputed.

A decode retraction in PD mode (``pause_generation(mode="retract")``, every
DeepSeek-V4 decode retraction) rebootstraps the request: decode registers
``len(origin_input_ids) + len(output_ids)`` tokens (``_rebootstrap_prefill_len``)
and prefill recomputes and digests all of them (``send_kv_chunk``). Decode's
``_verify_kv_checksums`` must digest the same range of its row, or a byte-exact
transfer is rejected as corrupt.

Upstream location: test/registered/unit/disaggregation/.
"""

import unittest
from types import SimpleNamespace
from unittest.mock import Mock, patch

import torch

from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.decode import (
    DecodePreallocQueue,
    SchedulerDisaggregationDecodeMixin,
)
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

REQ_POOL_IDX = 1
HANDOFF_TOKEN = 31337


def _allocator(page_size, kvcache=None):
    allocator = PagedTokenToKVPoolAllocator.__new__(PagedTokenToKVPoolAllocator)
    allocator.page_size = page_size
    allocator._kvcache = SimpleNamespace() if kvcache is None else kvcache
    # Identity full->SWA map: the SWA window's page ids equal the full ones.
    allocator.translate_loc_from_full_to_swa = lambda kv_indices: kv_indices
    return allocator


def _swa_pool():
    return SWAKVPool.__new__(SWAKVPool)


def _row_pool(num_pages, page_size):
    # Pages 3, 4, 5, ... so a page id never equals its position.
    row = torch.zeros((REQ_POOL_IDX + 1, num_pages * page_size), dtype=torch.int32)
    row[REQ_POOL_IDX] = torch.arange(
        3 * page_size, (3 + num_pages) * page_size, dtype=torch.int32
    )
    return SimpleNamespace(req_to_token=row)


def _pages(req_to_token_pool, page_size, start, end):
    tokens = req_to_token_pool.req_to_token[REQ_POOL_IDX, start:end]
    return (tokens[::page_size] // page_size).tolist()


def _req(input_ids, max_new_tokens=4096):
    return Req(
        "r0",
        "",
        list(input_ids),
        SamplingParams(max_new_tokens=max_new_tokens),
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        bootstrap_room=12345,
    )


def _computer():
    computer = Mock()
    computer.compute.return_value = 0x1234
    return computer


def _digested(computer):
    kv, state = computer.compute.call_args.args
    return kv.tolist(), None if state is None else state.tolist()


class _FakeDecodeScheduler(SchedulerDisaggregationDecodeMixin):
    def __init__(self, allocator, req_to_token_pool, sliding_window_size=None):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.sliding_window_size = sliding_window_size
        self.kv_checksum_computer = _computer()
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        self.attn_tp_cpu_group = None


class _FakePrefillScheduler(SchedulerDisaggregationPrefillMixin):
    def __init__(self, allocator, req_to_token_pool, sliding_window_size=None):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.sliding_window_size = sliding_window_size
        self.kv_checksum_computer = _computer()
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED,
            kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=[])),
        )
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=Mock(), set_kv_checksum=Mock()
        )


def _decode_req_at_verify(prompt_len, emitted, retract):
    """Decode's request as `_verify_kv_checksums` sees it, and the token count
    decode registered and asked prefill for."""
    req = _req(range(100, 100 + prompt_len))
    req.output_ids.extend(range(200, 200 + emitted))
    if retract:
        # pause_generation(mode="retract") on a decode worker.
        if req.output_ids:
            req.pd_rebootstrap_forced_output_id = req.output_ids.pop()
        req.pd_rebootstrap_in_progress = True
    registered = DecodePreallocQueue._rebootstrap_prefill_len(req)
    assert registered == DecodePreallocQueue._pre_alloc_fill_len(req)
    req.kv.req_pool_idx = REQ_POOL_IDX
    req.kv.cache_protected_len = 0  # no radix match for a rebootstrap
    payload_ids = (
        req.build_rebootstrap_payload()["input_ids"]
        if retract
        else list(req.origin_input_ids)
    )
    # _commit_transfer_to_req: replays the boundary token or takes prefill's.
    forced = req.pd_rebootstrap_forced_output_id
    req.pd_rebootstrap_forced_output_id = None
    req.output_ids.append(HANDOFF_TOKEN if forced is None else forced)
    req.expected_kv_checksum = 0x1234
    # prepare_for_prebuilt clears the flag before the batch is verified.
    req.pd_rebootstrap_in_progress = False
    return req, registered, payload_ids


def _verify(sched, req):
    batch = SimpleNamespace(reqs=[req], filter_batch=Mock())
    with patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags):
        sched._verify_kv_checksums(batch)
    batch.filter_batch.assert_not_called()
    return _digested(sched.kv_checksum_computer)


def _prefill_digest(sched, input_ids, decode_prefix_len=0):
    req = _req(input_ids, max_new_tokens=1)
    req.kv.req_pool_idx = REQ_POOL_IDX
    req.extend_end = len(req.origin_input_ids)
    req.disagg_decode_prefix_len = decode_prefix_len
    req.start_send_idx = 0
    sender = Mock(supports_host_tensor_indices=False)
    sender.get_max_transfer_tokens.return_value = None
    sender.should_send_kv_chunk.return_value = True
    req.disagg_kv_sender = sender
    sched.send_kv_chunk(req, last_chunk=True)
    sent = [int(p) for call in sender.send.call_args_list for p in call.args[0]]
    return _digested(sched.kv_checksum_computer), sent


class TestKvChecksumRebootstrap(unittest.TestCase):
    def _assert_digests_what_it_received(self, page_size, prompt_len, emitted):
        req, registered, _ = _decode_req_at_verify(prompt_len, emitted, True)
        self.assertEqual(registered, prompt_len + emitted - 1)
        pool = _row_pool(-(-registered // page_size), page_size)
        sched = _FakeDecodeScheduler(_allocator(page_size), pool)
        kv, _ = _verify(sched, req)
        self.assertEqual(kv, _pages(pool, page_size, 0, registered))

    def test_rebootstrapped_request_digests_the_pages_it_received(self):
        # 300 tokens generated before the retraction add 5 pages of 64.
        self._assert_digests_what_it_received(64, 1000, 300)

    def test_rebootstrapped_request_page_size_one(self):
        # At page size 1 every recomputed output is a page of its own.
        self._assert_digests_what_it_received(1, 1, 2)

    def test_rebootstrapped_digest_pairs_with_prefill(self):
        # Same row on both sides, so equal digests need equal page lists.
        page_size, prompt_len, emitted = 4, 6, 4
        req, registered, payload_ids = _decode_req_at_verify(
            prompt_len, emitted, True
        )
        pool = _row_pool(-(-registered // page_size), page_size)
        prefill = _FakePrefillScheduler(_allocator(page_size), pool)
        (prefill_kv, _), sent = _prefill_digest(prefill, payload_ids)
        self.assertEqual(prefill_kv, sent)
        decode_sched = _FakeDecodeScheduler(_allocator(page_size), pool)
        self.assertEqual(_verify(decode_sched, req), (prefill_kv, None))

    def test_rebootstrapped_swa_window_pairs_with_prefill(self):
        # The SWA state window ends where the transferred KV ends.
        page_size, window, prompt_len, emitted = 4, 8, 10, 13
        req, registered, payload_ids = _decode_req_at_verify(
            prompt_len, emitted, True
        )
        pool = _row_pool(-(-registered // page_size), page_size)
        prefill = _FakePrefillScheduler(
            _allocator(page_size, _swa_pool()), pool, window
        )
        prefill_digest, _ = _prefill_digest(prefill, payload_ids)
        decode_sched = _FakeDecodeScheduler(
            _allocator(page_size, _swa_pool()), pool, window
        )
        self.assertEqual(_verify(decode_sched, req), prefill_digest)

    def test_rebootstrap_before_any_output(self):
        # Retracted before its first token: prefill recomputes the prompt only.
        req, registered, _ = _decode_req_at_verify(10, 0, True)
        self.assertEqual(registered, 10)
        pool = _row_pool(3, 4)
        kv, _ = _verify(_FakeDecodeScheduler(_allocator(4), pool), req)
        self.assertEqual(kv, _pages(pool, 4, 0, 10))

    def test_first_handoff_range_unchanged(self):
        # A first handoff digests [decode prefix, prompt), as before.
        req, registered, _ = _decode_req_at_verify(10, 0, False)
        req.kv.cache_protected_len = 4
        pool = _row_pool(3, 4)
        kv, _ = _verify(_FakeDecodeScheduler(_allocator(4), pool), req)
        self.assertEqual(kv, _pages(pool, 4, 4, 10))


if __name__ == "__main__":
    unittest.main()
