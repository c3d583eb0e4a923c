"""KV checksum state indices for a hybrid SWA pool with MXFP8 block scales.

An SWAKVPool over MHATokenToKVPoolMXFP8 sub-pools registers three PD state
components: SWA (by SWA pages), BLOCK_SCALE (the full-attention scales, by KV
pages) and BLOCK_SCALE_SWA (by SWA pages). Each must be digested at the items
its transfer payload carries, or the two sides digest unrelated rows.

Upstream location: test/registered/unit/disaggregation/.
"""

import ctypes
import unittest
import zlib
from types import SimpleNamespace
from unittest.mock import patch

import torch

from sglang.srt.disaggregation import checksum, decode
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
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import (
    MHATokenToKVPool,
    MHATokenToKVPoolMXFP8,
    ReqToTokenPool,
)
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

PAGE = 128
WINDOW = 128
SEQ_LEN = 300
REQ_POOL_IDX = 1


class _OnDevice(torch.Tensor):
    """CPU index tensor standing in for the device tensor `compute` expects."""

    @property
    def is_cuda(self):
        return True


def _on_device(t):
    if t is None:
        return None
    if isinstance(t, (list, tuple)):
        return [x.as_subclass(_OnDevice) for x in t]
    return t.as_subclass(_OnDevice)


def _cpu_adler32(data_ptrs, strides, indices):
    parts = []
    for base, stride, idx in zip(data_ptrs, strides, indices):
        for i in torch.Tensor.tolist(idx):
            parts.append(ctypes.string_at(int(base) + i * int(stride), int(stride)))
    return zlib.adler32(b"".join(parts)) if parts else 1


class _CpuChecksumComputer(KvChecksumComputer):
    def compute(self, kv_page_indices_gpu, state_indices_gpu=None):
        with patch.object(checksum, "adler32_strided_checksum", _cpu_adler32):
            return super().compute(
                _on_device(kv_page_indices_gpu), _on_device(state_indices_gpu)
            )


def _engine(full_pages, swa_pages, pool_class, other_byte):
    size = (max(full_pages + swa_pages) + 1) * PAGE
    size_swa = (max(swa_pages) + 1) * PAGE
    dtype = torch.float8_e4m3fn if pool_class is MHATokenToKVPoolMXFP8 else torch.bfloat16
    pool = SWAKVPool(
        size=size,
        size_swa=size_swa,
        page_size=PAGE,
        dtype=dtype,
        head_num=1,
        head_dim=32,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
        token_to_kv_pool_class=pool_class,
        enable_alt_stream=False,
    )
    allocator = SWATokenToKVPoolAllocator(
        size, size_swa, PAGE, dtype, "cpu", pool, need_sort=False
    )
    for full, swa in zip(full_pages, swa_pages):
        allocator.full_to_swa_index_mapping[full * PAGE : (full + 1) * PAGE] = (
            torch.arange(swa * PAGE, (swa + 1) * PAGE)
        )
    req_to_token_pool = ReqToTokenPool(
        size=4,
        max_context_len=len(full_pages) * PAGE,
        device="cpu",
        enable_memory_saver=False,
    )
    req_to_token_pool.req_to_token[REQ_POOL_IDX] = torch.tensor(
        [p * PAGE + o for p in full_pages for o in range(PAGE)], dtype=torch.int32
    )
    kv_args = SimpleNamespace()
    kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = (
        get_kv_transfer_buf_infos(pool)
    )
    setup_state_kv_args(kv_args, pool, None, req_to_token_pool=req_to_token_pool)
    tensors = list(pool.full_kv_pool.k_buffer) + list(pool.full_kv_pool.v_buffer)
    tensors += list(pool.swa_kv_pool.k_buffer) + list(pool.swa_kv_pool.v_buffer)
    for sub in (pool.full_kv_pool, pool.swa_kv_pool):
        if isinstance(sub, MHATokenToKVPoolMXFP8):
            tensors += list(sub.k_scale_buffer) + list(sub.v_scale_buffer)
    for t in tensors:
        t.view(torch.uint8).fill_(other_byte)  # another request's bytes
    scheduler = SimpleNamespace(
        token_to_kv_pool_allocator=allocator,
        req_to_token_pool=req_to_token_pool,
        sliding_window_size=WINDOW,
        kv_args=kv_args,
        full_pages=full_pages,
        swa_pages=swa_pages,
    )
    scheduler.computer = _CpuChecksumComputer(
        torch.device("cpu"),
        kv_data_ptrs=kv_args.kv_data_ptrs,
        kv_item_lens=kv_args.kv_item_lens,
        state_data_ptrs=kv_args.state_data_ptrs,
        state_item_lens=kv_args.state_item_lens,
    )
    return scheduler


def _components(engine):
    """(state type, [(ptr, item_len)]) per registered state component, KV first."""
    a = engine.kv_args
    out = [("kv", list(zip(a.kv_data_ptrs, a.kv_item_lens)))]
    for st, ptrs, items in zip(a.state_types, a.state_data_ptrs, a.state_item_lens):
        out.append((st.value, list(zip(ptrs, items))))
    return out


def _ids(engine, kind):
    return engine.swa_pages if kind in ("swa", "block_scale_swa") else engine.full_pages


class TestSWAMXFP8ChecksumStateIndices(unittest.TestCase):
    def setUp(self):
        self.prefill = _engine([5, 2, 7], [4, 6, 2], MHATokenToKVPoolMXFP8, 0xA5)
        self.decode = _engine([3, 6, 1], [2, 8, 5], MHATokenToKVPoolMXFP8, 0x5A)
        self.req = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX))

    def test_block_scales_are_indexed_by_kv_pages(self):
        indices = state_indices_for_request(self.prefill, self.req, SEQ_LEN)
        kinds = [st.value for st in self.prefill.kv_args.state_types]
        self.assertEqual(kinds, ["swa", "block_scale", "block_scale_swa"])
        self.assertIsInstance(indices, (list, tuple))
        by_kind = dict(zip(kinds, [t.tolist() for t in indices]))
        kv_pages = page_indices_for_request(self.prefill, self.req, SEQ_LEN).tolist()
        self.assertEqual(by_kind["block_scale"], kv_pages)
        self.assertEqual(by_kind["swa"], by_kind["block_scale_swa"])

    def test_byte_exact_transfer_verifies(self):
        pre, dec = self.prefill, self.decode
        for k, (kind, bufs) in enumerate(_components(pre)):
            for b, (ptr, item) in enumerate(bufs):
                for i, page in enumerate(_ids(pre, kind)):
                    ctypes.memset(int(ptr) + page * int(item), 1 + i + 3 * b + 50 * k, int(item))
        sched = SimpleNamespace(
            token_to_kv_pool_allocator=pre.token_to_kv_pool_allocator,
            req_to_token_pool=pre.req_to_token_pool,
            sliding_window_size=WINDOW,
        )
        with get_parallel().override(attn_dcp_size=1):
            expected = pre.computer.compute(
                page_indices_for_request(sched, self.req, SEQ_LEN),
                state_indices_for_request(sched, self.req, SEQ_LEN),
            )
        # a byte-exact transfer of every component, logical page for logical page
        for (kind, src), (_, dst) in zip(_components(pre), _components(dec)):
            for (sp, item), (dp, _) in zip(src, dst):
                for s, d in zip(_ids(pre, kind), _ids(dec, kind)):
                    ctypes.memmove(int(dp) + d * int(item), int(sp) + s * int(item), int(item))
        dreq = SimpleNamespace(
            rid="r0",
            bootstrap_room=1,
            bootstrap_host="h",
            bootstrap_port=1,
            return_logprob=False,
            kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX, cache_protected_len=0),
            origin_input_ids=[0] * SEQ_LEN,
            expected_kv_checksum=expected,
            output_ids=[0],
        )
        batch = SimpleNamespace(reqs=[dreq])
        batch.filter_batch = lambda keep_indices: setattr(
            batch, "reqs", [batch.reqs[i] for i in keep_indices]
        )
        scheduler = SchedulerDisaggregationDecodeMixin.__new__(
            type("DecodeScheduler", (SchedulerDisaggregationDecodeMixin,), {})
        )
        scheduler.token_to_kv_pool_allocator = dec.token_to_kv_pool_allocator
        scheduler.req_to_token_pool = dec.req_to_token_pool
        scheduler.sliding_window_size = WINDOW
        scheduler.kv_checksum_computer = dec.computer
        scheduler.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        scheduler.attn_tp_cpu_group = None
        scheduler.tree_cache = None
        scheduler.output_streamer = SimpleNamespace(stream_output=lambda *a, **k: None)
        scheduler.metrics_reporter = SimpleNamespace(enable_metrics=False)
        aborted = []
        with (
            get_parallel().override(attn_dcp_size=1),
            patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags),
            patch.object(decode, "is_in_ci", lambda: False),
            patch.object(decode, "prepare_abort", lambda r, msg, **kw: aborted.append(msg)),
            patch.object(decode, "release_kv_cache", lambda *a, **kw: None),
        ):
            scheduler._verify_kv_checksums(batch)
        self.assertEqual(aborted, [])
        self.assertEqual(len(batch.reqs), 1)

    def test_swa_pool_without_block_scales_keeps_one_vector(self):
        plain = _engine([5, 2, 7], [4, 6, 2], MHATokenToKVPool, 0xA5)
        indices = state_indices_for_request(plain, self.req, SEQ_LEN)
        self.assertEqual([st.value for st in plain.kv_args.state_types], ["swa"])
        self.assertIsInstance(indices, torch.Tensor)
        self.assertEqual(indices.tolist(), [6, 2])


if __name__ == "__main__":
    unittest.main()
