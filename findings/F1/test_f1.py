"""Decode prealloc with a pending HiCache restore: full-from-0 state lists name only held pages.

QSA_COMPRESSED, MINIMAX_DENSE_KV and BLOCK_SCALE register a page for every
position from 0 (``_full_kv_pages_payload``). While the HiCache restore of
[L1, decode_prefix_len) is pending, the request holds no page there, and
``DecodeReqToTokenPool`` never clears a freed row: the list must not name the
padding page 0 or a page id left in a reused row by an earlier request.
"""

import unittest
from array import array
from types import SimpleNamespace
from unittest.mock import patch

import torch

from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.base.conn import StateType
from sglang.srt.disaggregation.decode_hicache_mixin import DecodePrefixMatch
from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (datasets); not in a CPU-only env
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

FULL_FROM_ZERO = (
    StateType.QSA_COMPRESSED,
    StateType.MINIMAX_DENSE_KV,
    StateType.BLOCK_SCALE,
)


class _Receiver:
    supports_host_destination = False

    def __init__(self):
        self.sent = None

    def send_metadata(self, kv_pages, aux_index, state_indices, **kwargs):
        self.sent = SimpleNamespace(
            kv_pages=list(kv_pages),
            state=[None if s is None else [int(p) for p in s] for s in state_indices],
            decode_prefix_len=kwargs.get("decode_prefix_len"),
        )


class _Queue(decode.DecodePreallocQueue):
    """DecodePreallocQueue without the transfer engine, handshake or radix tree."""

    def __init__(self, *, page_size, num_pages, rows, context_len, state_types):
        self.pp_size = 1
        self.queue, self.pending_reqs, self.retracted_queue = [], [], []
        self.num_reserved_decode_tokens = 0
        self._num_published_destinations = 0
        self.draft_token_to_kv_pool = None
        self.transfer_backend = None
        self.transfer_queue = SimpleNamespace(enable_staging=False, queue=[])
        self.tree_cache = SimpleNamespace(
            evictable_size=lambda: 0,
            protected_size=lambda: 0,
            maybe_hand_to_session=lambda req: None,
            unlock=lambda lock: None,
        )
        self.scheduler = SimpleNamespace(
            running_batch=SimpleNamespace(reqs=[]),
            waiting_queue=[],
            last_batch=None,
            enable_priority_scheduling=False,
            enable_hisparse=False,
            enable_lora=False,
            enable_decode_hicache=True,
            sliding_window_size=None,
            tp_worker=SimpleNamespace(is_hybrid_swa=False),
        )
        self.token_to_kv_pool = SimpleNamespace(page_size=page_size)
        self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
            num_pages * page_size,
            page_size,
            torch.int64,
            "cpu",
            kvcache=self.token_to_kv_pool,
            need_sort=False,
        )
        self.req_to_token_pool = decode.DecodeReqToTokenPool(
            rows, context_len, "cpu", False, 0
        )
        self.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(8)
        self.kv_manager = SimpleNamespace(
            kv_args=SimpleNamespace(state_types=list(state_types))
        )
        self.prefix_match = None

    def _resolve_pending_reqs(self):
        pass

    def _update_handshake_waiters(self, *args):
        pass

    def _match_prefix_and_lock(self, req):
        req.lock = None
        return self.prefix_match

    def admit(self, rid, length, *, l1=(), host_hit=0, max_new_tokens=16):
        self.prefix_match = DecodePrefixMatch(
            prefix_indices=torch.tensor(l1, dtype=torch.int64),
            l2_host_hit_length=host_hit,
            l3_storage_hit_length=0,
            last_device_node=None,
        )
        req = Req(
            rid,
            "",
            array("q", [1] * length),
            SamplingParams(max_new_tokens=max_new_tokens),
            bootstrap_host="127.0.0.1",
            bootstrap_port=8998,
            bootstrap_room=0,
        )
        receiver = _Receiver()
        self.queue = [
            decode.DecodeRequest(req=req, kv_receiver=receiver, waiting_for_input=True)
        ]
        free_before = set(self.token_to_kv_pool_allocator.free_pages.tolist())
        disagg = SimpleNamespace(
            disaggregation_decode_host_receive_threshold=1.0,
            disaggregation_decode_enable_radix_cache=True,
            disaggregation_decode_allocation_policy="early",
        )
        with patch.object(decode, "get_disagg", return_value=disagg), patch.object(
            decode,
            "get_memory",
            return_value=SimpleNamespace(disable_radix_cache=False),
        ):
            done, failed = self.pop_preallocated()
        assert [d.req.rid for d in done] == [rid] and not failed
        taken = free_before - set(self.token_to_kv_pool_allocator.free_pages.tolist())
        return req, receiver.sent, taken


def _held_pages(queue, req, l1, taken):
    """The page the request holds for each logical page of its prompt."""
    ps = queue.token_to_kv_pool_allocator.page_size
    row = queue.req_to_token_pool.req_to_token[req.kv.req_pool_idx].tolist()
    held = []
    for pos in range(0, len(req.origin_input_ids), ps):
        if pos < len(l1):
            held.append(l1[pos] // ps)
        elif row[pos] // ps in taken:
            held.append(row[pos] // ps)
        else:
            held.append(None)
    return held


class TestDecodeFullStatePagesWithHiCacheRestore(CustomTestCase):
    def _assert_full_state_lists_held(self, queue, req, sent, l1, taken):
        held = _held_pages(queue, req, l1, taken)
        for st, pages in zip(queue.kv_manager.kv_args.state_types, sent.state):
            if st not in FULL_FROM_ZERO:
                continue
            # A list may start past the prefix decode already holds.
            expected = held[len(held) - len(pages) :]
            self.assertNotIn(None, expected, f"{st.name} covers unheld positions")
            self.assertEqual(pages, expected, f"{st.name} names pages not held")

    def test_reused_row_does_not_leak_stale_pages(self):
        """A reused row must not hand prefill another live request's pages."""
        ps, system_page = 128, 40
        for state_type in FULL_FROM_ZERO:
            with self.subTest(state_type=state_type.name):
                queue = _Queue(
                    page_size=ps,
                    num_pages=64,
                    rows=2,
                    context_len=1024,
                    state_types=[state_type],
                )
                alloc = queue.token_to_kv_pool_allocator
                alloc.free_pages = alloc.free_pages[alloc.free_pages != system_page]
                l1 = [system_page * ps + o for o in range(ps)]

                # Turn 1 fills row 1 with pages 1..3, then finishes; its pages
                # are evicted to host and reused by a live request on row 2.
                req_a, _, taken_a = queue.admit("a", 512, l1=l1)
                queue.req_to_token_pool.free(req_a)
                alloc.free(
                    torch.tensor(
                        [p * ps + o for p in sorted(taken_a) for o in range(ps)]
                    )
                )
                _, _, taken_c = queue.admit("c", 300)
                self.assertEqual(taken_c, taken_a)

                # Turn 2: L1 128 on device, L2 384 on host (restore pending),
                # on turn 1's stale row.
                req_b, sent, taken_b = queue.admit("b", 700, l1=l1, host_hit=384)
                self.assertEqual(req_b.kv.req_pool_idx, 1)
                for pages in sent.state:
                    self.assertFalse(set(pages) & taken_c, "names a live request's page")
                self._assert_full_state_lists_held(queue, req_b, sent, l1, taken_b)

    def test_pending_restore_never_names_padding_page(self):
        # Page size 1, L = 1, decode_prefix_len = 1 by an L2 host hit, fresh row.
        queue = _Queue(
            page_size=1,
            num_pages=9,
            rows=2,
            context_len=2,
            state_types=[StateType.QSA_COMPRESSED],
        )
        req, sent, taken = queue.admit("r0", 1, host_hit=1, max_new_tokens=4)
        self.assertNotIn(0, sent.state[0])
        self._assert_full_state_lists_held(queue, req, sent, [], taken)

    def test_host_hit_kept_without_full_state_lists(self):
        # DSA lists start at decode_prefix_len; the L2 promise is unaffected.
        queue = _Queue(
            page_size=4,
            num_pages=16,
            rows=2,
            context_len=32,
            state_types=[StateType.DSA],
        )
        alloc = queue.token_to_kv_pool_allocator
        alloc.free_pages = alloc.free_pages[alloc.free_pages != 9]
        l1 = [36, 37, 38, 39]
        _, sent, _ = queue.admit("r0", 23, l1=l1, host_hit=4)
        self.assertEqual(sent.decode_prefix_len, 8)
        self.assertEqual(len(sent.kv_pages), 4)


if __name__ == "__main__":
    unittest.main()
