"""KV checksum on pools that register PD state buffers outside the four known layouts.

With --disaggregation-enable-kv-checksum both roles build `KvChecksumComputer`
from `kv_args.state_data_ptrs`, and `compute` needs state indices for them.
`--kv-cache-dtype mxfp8` (`MHATokenToKVPoolMXFP8`) registers its UE8M0 block
scales as StateType.BLOCK_SCALE, one item per KV page, so its digest must cover
the same pages as the KV. `DeepSeekV4TokenToKVPool` registers state in several
index spaces; its digest must at least not raise on prefill or decode.

Upstream location: test/registered/unit/disaggregation/.
"""

import unittest
from types import SimpleNamespace
from unittest.mock import Mock, patch

import numpy as np
import torch

from sglang.srt.disaggregation import checksum, decode
from sglang.srt.disaggregation.base.conn import StateType
from sglang.srt.disaggregation.checksum import (
    KvChecksumComputer,
    page_indices_for_request,
    state_indices_for_request,
)
from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.utils import (
    get_kv_transfer_buf_infos,
    setup_state_kv_args,
)
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
from sglang.srt.mem_cache.memory_pool import (
    MHATokenToKVPool,
    MHATokenToKVPoolMXFP8,
    ReqToTokenPool,
)
from sglang.srt.runtime_context import create_context, get_parallel, use_context
from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

REQ_POOL_IDX = 2
PAGES = [5, 2, 7]
NUM_PAGES = 8


class _OnDevice(torch.Tensor):
    """CPU index tensor standing in for the device tensor `compute` expects."""

    @property
    def is_cuda(self):
        return True


class _CpuChecksumComputer(KvChecksumComputer):
    """The real computer; only its CUDA index tensors are CPU ones here."""

    def compute(self, kv_page_indices_gpu, state_indices_gpu=None):
        tag = lambda t: None if t is None else t.as_subclass(_OnDevice)  # noqa: E731
        return super().compute(tag(kv_page_indices_gpu), tag(state_indices_gpu))


def _kv_args(pool):
    kv_args = SimpleNamespace()
    kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = (
        get_kv_transfer_buf_infos(pool)
    )
    setup_state_kv_args(kv_args, pool)
    return kv_args


def _computer(kv_args):
    return _CpuChecksumComputer(
        torch.device("cpu"),
        kv_data_ptrs=kv_args.kv_data_ptrs,
        kv_item_lens=kv_args.kv_item_lens,
        state_data_ptrs=kv_args.state_data_ptrs,
        state_item_lens=kv_args.state_item_lens,
    )


def _req_to_token_pool(page_size, pages):
    pool = ReqToTokenPool(
        size=4,
        max_context_len=len(pages) * page_size,
        device="cpu",
        enable_memory_saver=False,
    )
    pool.req_to_token[REQ_POOL_IDX] = torch.tensor(
        [p * page_size + o for p in pages for o in range(page_size)],
        dtype=torch.int32,
    )
    return pool


def _mha_engine(pool_cls, page_size=128):
    pool = pool_cls(
        size=NUM_PAGES * page_size,
        page_size=page_size,
        dtype=(
            torch.float8_e4m3fn if pool_cls is MHATokenToKVPoolMXFP8 else torch.bfloat16
        ),
        head_num=2,
        head_dim=64,
        layer_num=2,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    allocator = PagedTokenToKVPoolAllocator(
        NUM_PAGES * page_size,
        page_size=page_size,
        dtype=pool.dtype,
        device="cpu",
        kvcache=pool,
        need_sort=False,
    )
    return pool, allocator, _req_to_token_pool(page_size, PAGES)


def _deepseek_v4_engine(page_size=256):
    """SGLang's DeepSeekV4TokenToKVPool (layers [SWA-only, C4, C128]; 448 + 64
    nope/rope dims are its 584-byte FP8 token) and the SWA allocator the KV
    configurator gives it, built on CPU under a dummy-model prefill server's
    runtime context (the pool reads the server's configuration)."""
    server_args = ServerArgs(
        model_path="dummy", device="cpu", disaggregation_mode="prefill"
    )
    with use_context(create_context(server_args, role="scheduler")):
        pool = DeepSeekV4TokenToKVPool(
            max_num_reqs=2,
            swa_size=NUM_PAGES // 2 * page_size,
            c4_size=NUM_PAGES * page_size // 4,
            c128_size=NUM_PAGES * page_size // 128,
            c4_state_pool_size=64,
            c128_state_pool_size=8,
            page_size=page_size,
            swa_page_size=page_size,
            sliding_window=128,
            dtype=torch.float8_e4m3fn,
            c4_state_dtype=torch.float32,
            c128_state_dtype=torch.float32,
            qk_nope_head_dim=448,
            qk_rope_head_dim=64,
            indexer_head_dim=128,
            layer_num=3,
            device="cpu",
            enable_memory_saver=False,
            compression_ratios=[0, 4, 128],
            kv_source_layers=[],
            full_size=NUM_PAGES * page_size,
        )
        allocator = SWATokenToKVPoolAllocator(
            NUM_PAGES * page_size,
            NUM_PAGES // 2 * page_size,
            page_size=page_size,
            dtype=torch.float8_e4m3fn,
            device="cpu",
            kvcache=pool,
            need_sort=False,
        )
    return pool, allocator, _req_to_token_pool(page_size, PAGES)


class _FakePrefillScheduler(SchedulerDisaggregationPrefillMixin):
    def __init__(self, allocator, req_to_token_pool, kv_args):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.kv_checksum_computer = _computer(kv_args)
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED,
            kv_manager=SimpleNamespace(kv_args=kv_args),
        )
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=Mock(), set_kv_checksum=Mock()
        )


class _FakeDecodeScheduler(SchedulerDisaggregationDecodeMixin):
    def __init__(self, allocator, req_to_token_pool, kv_args):
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.kv_checksum_computer = _computer(kv_args)
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        self.attn_tp_cpu_group = None


def _sender():
    sender = Mock(supports_host_tensor_indices=False)
    sender.get_max_transfer_tokens.return_value = None
    sender.should_send_kv_chunk.return_value = True
    return sender


def _prefill_req(seq_len, sender):
    return SimpleNamespace(
        rid="r0",
        origin_input_ids=[0] * seq_len,
        extend_end=seq_len,
        kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX),
        disagg_kv_sender=sender,
        start_send_idx=0,
        disagg_decode_prefix_len=0,
    )


def _decode_batch(seq_len):
    req = SimpleNamespace(
        rid="r0",
        bootstrap_room=12345,
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX, cache_protected_len=0),
        origin_input_ids=[0] * seq_len,
        expected_kv_checksum=0x1234,
        return_logprob=False,
        output_ids=[0],  # the handoff token, as a real Req holds it after the first transfer
    )
    return SimpleNamespace(reqs=[req], filter_batch=Mock())


def _kernel_call(kernel):
    ptrs, lens, indices = kernel.call_args.args
    return list(ptrs), list(lens), [t.tolist() for t in indices]


class TestKvChecksumStateIndices(unittest.TestCase):
    def setUp(self) -> None:
        self.enterContext(get_parallel().override(attn_dcp_size=1))
        self.kernel = self.enterContext(
            patch.object(checksum, "adler32_strided_checksum", return_value=0x1234)
        )

    def test_mxfp8_block_scale_state_indices_are_the_kv_pages(self):
        pool, allocator, req_to_token_pool = _mha_engine(MHATokenToKVPoolMXFP8)
        self.assertEqual(_kv_args(pool).state_types, [StateType.BLOCK_SCALE])
        sched = SimpleNamespace(
            token_to_kv_pool_allocator=allocator, req_to_token_pool=req_to_token_pool
        )
        req = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX))
        for start_idx in (0, 128):
            with self.subTest(start_idx=start_idx):
                state = state_indices_for_request(sched, req, 300, start_idx)
                self.assertIsNotNone(state)
                self.assertEqual(
                    state.tolist(),
                    page_indices_for_request(sched, req, 300, start_idx).tolist(),
                )

    def test_mxfp8_prefill_digests_the_block_scales_it_sends(self):
        pool, allocator, req_to_token_pool = _mha_engine(MHATokenToKVPoolMXFP8)
        kv_args = _kv_args(pool)
        sched = _FakePrefillScheduler(allocator, req_to_token_pool, kv_args)
        sender = _sender()
        sched.send_kv_chunk(_prefill_req(300, sender), last_chunk=True)

        sent_pages, sent_state = sender.send.call_args.args
        sent_scales = np.asarray(sent_state[0]).reshape(-1).tolist()
        self.assertEqual([int(p) for p in sent_pages], PAGES)
        self.assertEqual(sent_scales, PAGES)
        ptrs, lens, indices = _kernel_call(self.kernel)
        num_kv = len(kv_args.kv_data_ptrs)
        self.assertEqual(ptrs[num_kv:], kv_args.state_data_ptrs[0])
        self.assertEqual(lens[num_kv:], kv_args.state_item_lens[0])
        self.assertEqual(indices, [PAGES] * num_kv + [sent_scales] * (len(ptrs) - num_kv))
        sched.disagg_metadata_buffers.set_kv_checksum.assert_called_once()

    def test_mxfp8_decode_verifies_its_block_scales(self):
        pool, allocator, req_to_token_pool = _mha_engine(MHATokenToKVPoolMXFP8)
        kv_args = _kv_args(pool)
        sched = _FakeDecodeScheduler(allocator, req_to_token_pool, kv_args)
        batch = _decode_batch(300)
        with patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags):
            sched._verify_kv_checksums(batch)
        batch.filter_batch.assert_not_called()
        _, _, indices = _kernel_call(self.kernel)
        self.assertEqual(indices, [PAGES] * len(indices))
        self.assertEqual(
            len(indices), len(kv_args.kv_data_ptrs) + len(kv_args.state_data_ptrs[0])
        )

    def test_deepseek_v4_checksum_does_not_raise(self):
        pool, allocator, req_to_token_pool = _deepseek_v4_engine()
        kv_args = _kv_args(pool)
        self.assertEqual(
            kv_args.state_types, [StateType.SWA, StateType.DSV4_REQUEST_STATE]
        )
        sched = _FakePrefillScheduler(allocator, req_to_token_pool, kv_args)
        # the V4 state payloads need an allocation; only the digest is under test
        sched._send_kv_chunk = Mock()
        sched.send_kv_chunk(_prefill_req(600, _sender()), last_chunk=True)
        sched._send_kv_chunk.assert_called_once()
        sched.disagg_metadata_buffers.set_kv_checksum.assert_called_once()
        ptrs, _, indices = _kernel_call(self.kernel)
        self.assertEqual(ptrs[: len(kv_args.kv_data_ptrs)], kv_args.kv_data_ptrs)
        self.assertEqual(indices[: len(kv_args.kv_data_ptrs)], [PAGES] * len(kv_args.kv_data_ptrs))

        dsched = _FakeDecodeScheduler(allocator, req_to_token_pool, kv_args)
        batch = _decode_batch(600)
        with patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags):
            dsched._verify_kv_checksums(batch)
        batch.filter_batch.assert_not_called()

    def test_pool_without_state_digests_kv_only(self):
        pool, allocator, req_to_token_pool = _mha_engine(MHATokenToKVPool)
        kv_args = _kv_args(pool)
        self.assertEqual(kv_args.state_types, [])
        sched = _FakePrefillScheduler(allocator, req_to_token_pool, kv_args)
        sched.send_kv_chunk(_prefill_req(300, _sender()), last_chunk=True)
        ptrs, _, indices = _kernel_call(self.kernel)
        self.assertEqual(ptrs, kv_args.kv_data_ptrs)
        self.assertEqual(indices, [PAGES] * len(ptrs))


if __name__ == "__main__":
    unittest.main()
