"""KV checksum state indices for hybrid linear pools with state besides Mamba.

A HybridLinearKVPool(use_dsa=True) (GLM-5.3-Flash) registers three PD state
components: MAMBA (by the request's Mamba slot), DSA (the indexer's keys, by
KV pages) and, with kpool compression, DSA_TAIL (sent as ring slots within
the request row, not as items). A QSATokenToKVPool (Qwen4-Exp) registers
MAMBA, QSA_PENDING (the pending key/RoPE ring, by request row) and
QSA_COMPRESSED (the compressed keys, by KV pages). Each must be digested at
the items its transfer payload carries, or the two sides digest unrelated
items.

Upstream location: test/registered/unit/disaggregation/.
"""

import ctypes
import unittest
import zlib
from types import SimpleNamespace
from unittest.mock import patch

import torch

from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation import checksum, decode
from sglang.srt.disaggregation.checksum import (
    KvChecksumComputer,
    page_indices_for_request,
    state_indices_for_request,
)
from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
from sglang.srt.disaggregation.utils import (
    get_dsa_tail_state_indices,
    get_kv_transfer_buf_infos,
    get_qsa_pending_state_indices,
    setup_state_kv_args,
)
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
from sglang.srt.mem_cache.qsa_kv_pool import QSATokenToKVPool
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

PAGE = 256  # 64 * index_kpool
KPOOL = 4
SEQ_LEN = 301  # two pages; one token pending compression in the tail
REQ_POOL_IDX = 1
REQUEST_ROWS = 8
QSA_PAGE = 64  # the page size the server sets for compressed QSA
QSA_RATIO = 4
QSA_SEQ_LEN = 150  # three pages


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


def _engine(pages, mamba_slot, other_byte, kind="dsa", row=REQ_POOL_IDX):
    page = QSA_PAGE if kind == "qsa" else PAGE
    size = (max(pages) + 1) * page
    shape = Mamba2StateShape.create(
        tp_world_size=1,
        intermediate_size=32,
        n_groups=1,
        num_heads=2,
        head_dim=16,
        state_size=8,
        conv_kernel=4,
    )
    req_to_token_pool = HybridReqToTokenPool(
        size=REQUEST_ROWS,
        mamba_size=REQUEST_ROWS,
        mamba_spec_state_size=REQUEST_ROWS,
        max_context_len=len(pages) * page,
        device="cpu",
        enable_memory_saver=False,
        cache_params=Mamba2CacheParams(shape=shape, layers=[0]),
        mamba_layer_ids=[0],
        enable_mamba_extra_buffer=True,
    )
    pool_class = HybridLinearKVPool
    if kind == "dsa":
        full_attention = dict(
            use_mla=True,
            kv_lora_rank=64,
            qk_rope_head_dim=16,
            use_dsa=True,
            index_head_dim=128,
            kv_cache_dim=80,
            index_kpool=KPOOL,
            index_kpool_compress=True,
            tail_extra_slots=0,
            max_running_requests=req_to_token_pool.req_to_token.shape[0],
        )
    elif kind == "qsa":
        pool_class = QSATokenToKVPool
        full_attention = dict(
            qsa_index_kv_heads=1,
            qsa_index_head_dim=16,
            qsa_compress_ratio=QSA_RATIO,
            qsa_token_topk=16 * QSA_RATIO,
            num_request_slots=req_to_token_pool.req_to_token.shape[0],
        )
    else:
        full_attention = {}
    with get_parallel().override(attn_dcp_size=1):
        pool = pool_class(
            size=size,
            dtype=torch.bfloat16,
            page_size=page,
            head_num=1,
            head_dim=8,
            full_attention_layer_ids=[1],
            device="cpu",
            mamba_pool=req_to_token_pool.mamba_pool,
            **full_attention,
        )
    allocator = PagedTokenToKVPoolAllocator(
        size,
        page_size=page,
        dtype=torch.bfloat16,
        device="cpu",
        kvcache=pool,
        need_sort=False,
    )
    req_to_token_pool.req_to_token[row, : len(pages) * page] = torch.tensor(
        [p * page + o for p in pages for o in range(page)], dtype=torch.int32
    )
    req_to_token_pool.req_index_to_mamba_index_mapping[row] = mamba_slot
    kv_args = SimpleNamespace()
    kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = (
        get_kv_transfer_buf_infos(pool)
    )
    setup_state_kv_args(kv_args, pool, None, req_to_token_pool=req_to_token_pool)
    for ptr, nbytes in zip(kv_args.kv_data_ptrs, kv_args.kv_data_lens):
        ctypes.memset(int(ptr), other_byte, int(nbytes))  # another request's bytes
    for ptrs, lens in zip(kv_args.state_data_ptrs, kv_args.state_data_lens):
        for ptr, nbytes in zip(ptrs, lens):
            ctypes.memset(int(ptr), other_byte, int(nbytes))
    scheduler = SimpleNamespace(
        token_to_kv_pool_allocator=allocator,
        req_to_token_pool=req_to_token_pool,
        sliding_window_size=None,
        kv_args=kv_args,
        pool=pool,
        pages=pages,
        mamba_slot=mamba_slot,
        row=row,
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


def _items(engine, kind):
    """The items of `kind` the transfer carries: the Mamba slot, the request
    row (the QSA pending ring), or KV pages."""
    if kind == "mamba":
        return [engine.mamba_slot]
    if kind == "qsa_pending":
        return [engine.row]
    return engine.pages


def _fill(engine):
    """The request's bytes in every item its transfer carries (not the tail)."""
    for k, (kind, bufs) in enumerate(_components(engine)):
        if kind == "dsa_tail":
            continue
        for b, (ptr, item) in enumerate(bufs):
            for i, it in enumerate(_items(engine, kind)):
                ctypes.memset(
                    int(ptr) + it * int(item), 1 + i + 3 * b + 50 * k, int(item)
                )


def _copy(src, dst, kind, src_bufs, dst_bufs):
    """A byte-exact transfer of one component, item for item."""
    for (sp, item), (dp, _) in zip(src_bufs, dst_bufs):
        for s, d in zip(_items(src, kind), _items(dst, kind)):
            ctypes.memmove(int(dp) + d * int(item), int(sp) + s * int(item), int(item))


def _verify_on_decode(dec, expected, seq_len):
    """Run decode's _verify_kv_checksums on the request; the abort messages."""
    dreq = SimpleNamespace(
        rid="r0",
        bootstrap_room=1,
        bootstrap_host="h",
        bootstrap_port=1,
        return_logprob=False,
        kv=SimpleNamespace(req_pool_idx=dec.row, cache_protected_len=0),
        origin_input_ids=[0] * seq_len,
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
    scheduler.sliding_window_size = None
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
    return aborted if aborted or len(batch.reqs) == 1 else ["dropped"]


class TestHybridDSAChecksumStateIndices(unittest.TestCase):
    def setUp(self):
        self.prefill = _engine([5, 2], 4, 0xA5)
        self.decode = _engine([3, 6], 1, 0x5A)
        self.req = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=REQ_POOL_IDX))

    def test_each_component_is_indexed_by_its_payload(self):
        indices = state_indices_for_request(self.prefill, self.req, SEQ_LEN)
        kinds = [st.value for st in self.prefill.kv_args.state_types]
        self.assertEqual(kinds, ["mamba", "dsa", "dsa_tail"])
        self.assertIsInstance(indices, (list, tuple))
        by_kind = dict(zip(kinds, [t.tolist() for t in indices]))
        kv_pages = page_indices_for_request(self.prefill, self.req, SEQ_LEN).tolist()
        self.assertEqual(by_kind["mamba"], [4])
        self.assertEqual(by_kind["dsa"], kv_pages)
        # sent as ring slots within the request row, not as whole items
        self.assertEqual(by_kind["dsa_tail"], [])

    def test_byte_exact_transfer_verifies(self):
        pre, dec = self.prefill, self.decode
        _fill(pre)
        with get_parallel().override(attn_dcp_size=1):
            expected = pre.computer.compute(
                page_indices_for_request(pre, self.req, SEQ_LEN),
                state_indices_for_request(pre, self.req, SEQ_LEN),
            )
        # a byte-exact transfer of every component, item for item; the tail
        # moves only the ring slots its descriptor names
        for (kind, src), (_, dst) in zip(_components(pre), _components(dec)):
            if kind == "dsa_tail":
                desc = get_dsa_tail_state_indices(pre.pool, REQ_POOL_IDX, SEQ_LEN)
                _, start, first_n, _, second_n, tail_size = desc
                self.assertEqual(second_n, 0)
                for (sp, item), (dp, _) in zip(src, dst):
                    slot = int(item) // tail_size
                    offset = REQ_POOL_IDX * int(item) + start * slot
                    ctypes.memmove(int(dp) + offset, int(sp) + offset, first_n * slot)
                continue
            _copy(pre, dec, kind, src, dst)
        self.assertEqual(_verify_on_decode(dec, expected, SEQ_LEN), [])

    def test_hybrid_pool_without_dsa_keeps_one_vector(self):
        plain = _engine([5, 2], 4, 0xA5, kind="plain")
        indices = state_indices_for_request(plain, self.req, SEQ_LEN)
        self.assertEqual([st.value for st in plain.kv_args.state_types], ["mamba"])
        self.assertIsInstance(indices, torch.Tensor)
        self.assertEqual(indices.tolist(), [4])


class TestHybridQSAChecksumStateIndices(unittest.TestCase):
    def setUp(self):
        # the request rows differ from the Mamba slots and between the sides
        self.prefill = _engine([5, 2, 7], 4, 0xA5, kind="qsa", row=2)
        self.decode = _engine([3, 6, 1], 1, 0x5A, kind="qsa", row=5)

    def _req(self, engine):
        return SimpleNamespace(kv=SimpleNamespace(req_pool_idx=engine.row))

    def test_each_component_is_indexed_by_its_payload(self):
        pre, req = self.prefill, self._req(self.prefill)
        indices = state_indices_for_request(pre, req, QSA_SEQ_LEN)
        kinds = [st.value for st in pre.kv_args.state_types]
        self.assertEqual(kinds, ["mamba", "qsa_pending", "qsa_compressed"])
        self.assertIsInstance(indices, (list, tuple))
        by_kind = dict(zip(kinds, [t.tolist() for t in indices]))
        self.assertEqual(by_kind["mamba"], [4])
        # the pending ring: one item per request row, as prefill sends it
        self.assertEqual(
            by_kind["qsa_pending"], get_qsa_pending_state_indices(req).tolist()
        )
        # the compressed keys: one item per KV page
        self.assertEqual(by_kind["qsa_compressed"], pre.pages)

    def test_byte_exact_transfer_verifies(self):
        pre, dec = self.prefill, self.decode
        _fill(pre)
        req = self._req(pre)
        expected = pre.computer.compute(
            page_indices_for_request(pre, req, QSA_SEQ_LEN),
            state_indices_for_request(pre, req, QSA_SEQ_LEN),
        )
        for (kind, src), (_, dst) in zip(_components(pre), _components(dec)):
            _copy(pre, dec, kind, src, dst)
        self.assertEqual(_verify_on_decode(dec, expected, QSA_SEQ_LEN), [])


if __name__ == "__main__":
    unittest.main()
