"""F5: with the PD KV checksum on, a hybrid SWA model on an MXFP8 KV cache digests its full-attention block scales at
SWA page ids, so decode rejects byte-exact transfers (SGLang 0.5.21-0.5.23).

Standalone: imports only sglang, torch, numpy and the standard library. Runs on CPU.

A hybrid SWA model (sliding-window and full-attention layers) with --kv-cache-dtype mxfp8 builds an ``SWAKVPool`` over
two ``MHATokenToKVPoolMXFP8`` sub-pools, and ``setup_state_kv_args`` (disaggregation/utils.py:1545-1569) registers
three state components for PD: SWA (the SWA KV, addressed by SWA pages), BLOCK_SCALE (the full-attention layers'
UE8M0 scales, one item per full KV page) and BLOCK_SCALE_SWA (the SWA layers' scales, by SWA pages). Prefill sends
each by its own payload (prefill.py: ``_swa_payload`` for SWA and BLOCK_SCALE_SWA, ``_full_kv_pages_payload`` for
BLOCK_SCALE). But ``state_indices_for_request`` (checksum.py:67-80) returns one index vector for an SWAKVPool - the
window's SWA pages - and ``KvChecksumComputer.compute`` (checksum.py:118-122) indexes every state buffer with it. The
full-attention block scales are digested at SWA page ids: rows that belong to other pages (of this request or of
another one), different rows on the two sides.

Runs SGLang's own code, unmodified: the pools (``SWAKVPool`` over ``MHATokenToKVPoolMXFP8``), the allocator
(``SWATokenToKVPoolAllocator``, the request's SWA slots set in its ``full_to_swa_index_mapping``), ``ReqToTokenPool``,
the PD registration (``get_kv_transfer_buf_infos``, ``setup_state_kv_args``), ``KvChecksumComputer``, prefill's
``send_kv_chunk`` (with ``_send_kv_chunk`` and its state payloads) and decode's ``_verify_kv_checksums``.

Stubbed, because it needs CUDA or a peer: the Adler-32 kernel (a CPU Adler-32 over the same items; ``compute``'s
``is_cuda`` asserts see CPU tensors tagged as on-device), the KV sender (records what ``_send_kv_chunk`` hands it),
the transfer (a byte copy of every sent item onto decode's destination for it, as decode's ``pop_preallocated``
names them), decode's one-rank all-reduce and abort hooks. Every item of both pools first holds another request's
bytes, as in a busy server.

Exit 1 while the defect is present (a block-scale digest reads rows other than the pages it scales, or decode rejects
the byte-exact transfer), 0 on a fixed SGLang.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import zlib
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch

import sglang
from sglang.srt.disaggregation import checksum, decode
from sglang.srt.disaggregation.checksum import KvChecksumComputer
from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.utils import get_kv_transfer_buf_infos, setup_state_kv_args
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.common import kv_to_page_indices
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPoolMXFP8, ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.runtime_context import get_parallel

PAGE = 128  # --page-size 128: the MXFP8 pool's production (interleaved-scale) layout
WINDOW = 128  # the model's sliding window, e.g. gpt-oss
PROMPT = 1000  # 8 pages, the last partial
CHUNKS = (512, 1000)  # --chunked-prefill-size 512
PREFILL = dict(full=[5, 2, 7, 11, 3, 14, 9, 1], swa=[4, 6, 2, 1, 3, 8, 7, 5], row=2)
DECODE = dict(full=[3, 6, 1, 12, 8, 15, 2, 10], swa=[2, 8, 5, 3, 6, 1, 4, 7], row=1)

_REGISTERED: dict[int, tuple[int, int, str]] = {}  # data_ptr -> (nbytes, item_len, state type or "kv")


class _OnDevice(torch.Tensor):
    @property
    def is_cuda(self) -> bool:
        return True


def _component_of(base: int) -> str:
    return _REGISTERED[base][2]


def _cpu_adler32_strided_checksum(data_ptrs, strides, indices) -> int:
    """CPU stand-in for the CUDA kernel ``adler32_strided_checksum``: Adler-32 of the selected items."""
    parts = []
    for base, stride, idx in zip(data_ptrs, strides, indices):
        nbytes = _REGISTERED[int(base)][0]
        for i in torch.Tensor.tolist(idx):
            assert 0 <= i and (i + 1) * stride <= nbytes, f"item {i} outside the buffer"
            parts.append(ctypes.string_at(int(base) + i * int(stride), int(stride)))
    return zlib.adler32(b"".join(parts)) if parts else 1


class RecordingChecksumComputer(KvChecksumComputer):
    """The real computer over the buffers the pool registers for PD; records the items each component was read at."""

    def __init__(self, kv_args):
        super().__init__(
            torch.device("cpu"),
            kv_data_ptrs=kv_args.kv_data_ptrs,
            kv_item_lens=kv_args.kv_item_lens,
            state_data_ptrs=kv_args.state_data_ptrs,
            state_item_lens=kv_args.state_item_lens,
        )
        self.reads: dict[str, list[int]] = {}

    def compute(self, kv_page_indices_gpu, state_indices_gpu=None) -> int:
        def kernel(data_ptrs, strides, indices):
            self.reads = {}
            for base, idx in zip(data_ptrs, indices):
                self.reads.setdefault(_component_of(int(base)), torch.Tensor.tolist(idx))
            return _cpu_adler32_strided_checksum(data_ptrs, strides, indices)

        def tag(t):
            if t is None:
                return None
            return [x.as_subclass(_OnDevice) for x in t] if isinstance(t, (list, tuple)) else t.as_subclass(_OnDevice)

        with mock.patch.object(checksum, "adler32_strided_checksum", kernel):
            return super().compute(tag(kv_page_indices_gpu), tag(state_indices_gpu))


class Engine:
    """One side: the hybrid SWA MXFP8 pool, its allocator, the request's row and its PD registration."""

    def __init__(self, *, full: list[int], swa: list[int], row: int, other: int):
        self.full, self.swa, self.row_idx = full, swa, row
        size = (max(full + swa) + 1) * PAGE
        self.pool = SWAKVPool(
            size=size, size_swa=(max(swa) + 1) * PAGE, page_size=PAGE, dtype=torch.float8_e4m3fn, head_num=1,
            head_dim=32, swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu",
            token_to_kv_pool_class=MHATokenToKVPoolMXFP8, enable_alt_stream=False,
        )  # fmt: skip
        self.allocator = SWATokenToKVPoolAllocator(
            size, (max(swa) + 1) * PAGE, PAGE, torch.float8_e4m3fn, "cpu", self.pool, need_sort=False
        )
        for f, s in zip(full, swa):  # the request's SWA slots, as alloc_extend maps them
            self.allocator.full_to_swa_index_mapping[f * PAGE : (f + 1) * PAGE] = torch.arange(s * PAGE, (s + 1) * PAGE)
        self.req_to_token_pool = ReqToTokenPool(
            size=4, max_context_len=len(full) * PAGE, device="cpu", enable_memory_saver=False
        )
        self.req_to_token_pool.req_to_token[row] = torch.tensor(
            [p * PAGE + o for p in full for o in range(PAGE)], dtype=torch.int32
        )
        self.kv_args = SimpleNamespace()
        self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens, self.kv_args.kv_item_lens = get_kv_transfer_buf_infos(
            self.pool
        )
        setup_state_kv_args(self.kv_args, self.pool, None, req_to_token_pool=self.req_to_token_pool)
        self.types = [t.value for t in self.kv_args.state_types]
        for ptr, n, item in zip(self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens, self.kv_args.kv_item_lens):
            _REGISTERED[int(ptr)] = (int(n), int(item), "kv")
        for kind, ptrs, lens, items in zip(
            self.types, self.kv_args.state_data_ptrs, self.kv_args.state_data_lens, self.kv_args.state_item_lens
        ):
            for ptr, n, item in zip(ptrs, lens, items):
                _REGISTERED[int(ptr)] = (int(n), int(item), kind)
        for base, (nbytes, _, _) in list(_REGISTERED.items()):  # another request's bytes everywhere
            if self.owns(base):
                ctypes.memset(base, other, nbytes)
        self.computer = RecordingChecksumComputer(self.kv_args)

    def owns(self, base: int) -> bool:
        return base in self.buffers()

    def buffers(self, kind: str | None = None) -> list[tuple[int, int]]:
        a = self.kv_args
        out = [(int(p), int(i)) for p, i in zip(a.kv_data_ptrs, a.kv_item_lens)] if kind in (None, "kv") else []
        for k, ptrs, items in zip(self.types, a.state_data_ptrs, a.state_item_lens):
            if kind in (None, k):
                out += [(int(p), int(i)) for p, i in zip(ptrs, items)]
        return out

    def fill(self, pages: range) -> None:
        """The bytes of logical pages ``pages`` (as prefill computed them), in every component."""
        for k, kind in enumerate(["kv", *self.types]):
            ids = self.swa if kind in ("swa", "block_scale_swa") else self.full
            for b, (base, item) in enumerate(self.buffers(kind)):
                for i in pages:
                    ctypes.memset(base + ids[i] * item, (7 * i + 3 * b + 50 * k) % 251 + 1, item)

    @property
    def row(self) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[self.row_idx, :PROMPT]


class Sender:
    supports_host_tensor_indices = False

    def __init__(self) -> None:
        self.kv: list[int] = []
        self.state = None

    def get_max_transfer_tokens(self):
        return None

    def should_send_kv_chunk(self, num_pages, last_chunk):
        return num_pages > 0 or last_chunk

    def send(self, kv_indices, state_indices=None, num_kv_tokens=None, indices_event=None):
        self.kv += [int(p) for p in kv_indices]
        if state_indices is not None:
            self.state = [np.asarray(s).reshape(-1).tolist() for s in state_indices]


class PrefillScheduler(SchedulerDisaggregationPrefillMixin):
    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.sliding_window_size = WINDOW
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED, kv_manager=SimpleNamespace(kv_args=engine.kv_args)
        )
        self.digests: list[int] = []
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=lambda req: None, set_kv_checksum=lambda req, digest, *sig: self.digests.append(digest)
        )


class DecodeScheduler(SchedulerDisaggregationDecodeMixin):
    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.sliding_window_size = WINDOW
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        self.attn_tp_cpu_group = None
        self.tree_cache = None
        self.output_streamer = SimpleNamespace(stream_output=lambda reqs, return_logprob: None)
        self.metrics_reporter = SimpleNamespace(enable_metrics=False)


def _copy(src: Engine, dst: Engine, kind: str, src_items, dst_items) -> None:
    for (sp, n), (dp, _) in zip(src.buffers(kind), dst.buffers(kind)):
        for s, d in zip(src_items, dst_items):
            ctypes.memmove(dp + int(d) * n, sp + int(s) * n, n)


def main() -> int:
    logging.getLogger(decode.__name__).setLevel(logging.CRITICAL)
    pre = Engine(other=0xA5, **PREFILL)
    dec = Engine(other=0x5A, **DECODE)
    pre.fill(range(len(pre.full)))

    # prefill: the prompt in two chunks; the last digests [0, 1000) and sends the state payloads
    sender = Sender()
    req = SimpleNamespace(
        rid="r0", origin_input_ids=[0] * PROMPT, kv=SimpleNamespace(req_pool_idx=pre.row_idx), disagg_kv_sender=sender,
        start_send_idx=0, disagg_decode_prefix_len=0, metadata_buffer_index=0,
    )  # fmt: skip
    psched = PrefillScheduler(pre)
    with get_parallel().override(attn_dcp_size=1):
        for k, end in enumerate(CHUNKS):
            req.extend_end = end
            psched.send_kv_chunk(req, last_chunk=k == len(CHUNKS) - 1)
    prefill_reads = pre.computer.reads

    # the transfer, item for item, onto decode's destinations as pop_preallocated names them
    window = max(0, PROMPT - WINDOW) // PAGE * PAGE
    swa_dst = kv_to_page_indices(dec.allocator.translate_swa_indices_for_transfer(dec.row[window:]), PAGE).tolist()
    landing = {"swa": swa_dst, "block_scale": kv_to_page_indices(dec.row, PAGE).tolist(), "block_scale_swa": swa_dst}
    _copy(pre, dec, "kv", sender.kv, kv_to_page_indices(dec.row, PAGE).tolist())
    for kind, items in zip(pre.types, sender.state):
        _copy(pre, dec, kind, items, landing[kind])

    # decode: verify the prebuilt batch
    aborted: list[str] = []
    dreq = SimpleNamespace(
        rid="r0", bootstrap_room=4242, bootstrap_host="10.0.0.1", bootstrap_port=8998, return_logprob=False,
        kv=SimpleNamespace(req_pool_idx=dec.row_idx, cache_protected_len=0), origin_input_ids=[0] * PROMPT,
        expected_kv_checksum=psched.digests[0], output_ids=[0],
    )  # fmt: skip
    batch = SimpleNamespace(reqs=[dreq])
    batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
    with (
        get_parallel().override(attn_dcp_size=1),
        mock.patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags),
        mock.patch.object(decode, "is_in_ci", lambda: False),
        mock.patch.object(decode, "prepare_abort", lambda r, msg, **kw: aborted.append(msg)),
        mock.patch.object(decode, "release_kv_cache", lambda *a, **kw: None),
    ):
        DecodeScheduler(dec)._verify_kv_checksums(batch)
    decode_reads = dec.computer.reads
    kept = len(batch.reqs) == 1 and not aborted

    want_prefill = kv_to_page_indices(pre.row, PAGE).tolist()
    want_decode = kv_to_page_indices(dec.row, PAGE).tolist()
    wrong = prefill_reads.get("block_scale") != want_prefill or decode_reads.get("block_scale") != want_decode
    present = wrong or not kept
    print(
        f"F5 {'REPRODUCED' if present else 'not reproduced'} on SGLang {sglang.__version__} "
        f"({os.path.dirname(sglang.__file__)}): a hybrid SWA model (window {WINDOW}) with --kv-cache-dtype mxfp8 "
        f"--page-size {PAGE} --disaggregation-enable-kv-checksum registers state components {pre.types}; prefill sends "
        f"the {PROMPT}-token prompt's full-attention block scales on its KV pages {sender.state[pre.types.index('block_scale')]}"
        f" and its SWA KV and scales on its SWA pages {sender.state[pre.types.index('swa')]} of the window. Prefill's "
        f"digest read the block_scale rows {prefill_reads.get('block_scale')} (its KV pages are {want_prefill}); "
        f"decode's read {decode_reads.get('block_scale')} (its KV pages are {want_decode}); "
        + (f"decode aborted the byte-exact transfer: {aborted[0]!r}. " if aborted else "decode kept the request. ")
        + "Expected: each state component digested by the items its payload carries (the full-attention scales by "
        "the KV pages), so a byte-exact transfer verifies."
    )  # fmt: skip
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
