"""F6: with the PD KV checksum on, a hybrid linear-attention model with state besides the Mamba slot - GLM-5.3-Flash's
DSA layers, Qwen4-Exp's QSA indexer - digests that state at the request's Mamba slot id, so decode rejects byte-exact
transfers (SGLang 0.5.21-0.5.23).

Standalone: imports only sglang, torch, numpy and the standard library. Runs on CPU.

``state_indices_for_request`` (checksum.py:58-66) returns one index vector for any HybridLinearKVPool - the request's
Mamba slot - and ``KvChecksumComputer.compute`` (checksum.py:119-124) indexes every registered state buffer with it.
Two released models register more than the Mamba state (``setup_state_kv_args``, disaggregation/utils.py):

- GLM-5.3-Flash (KDA linear layers and DSA layers, a pooled, compressed indexer: index_kpool 4, index_kpool_compress)
  builds a ``HybridLinearKVPool(use_dsa=True)`` over a ``DSATokenToKVPool``: MAMBA (one slot per request), DSA (the
  indexer's keys, one item per KV page) and DSA_TAIL (the compression tails, one item per request row)
  (utils.py:1618-1644). Prefill sends each by its own payload (prefill.py:1678-1683: ``_mamba_payload`` the slot,
  ``_dsa_pages_payload`` its KV pages past decode's prefix, ``_dsa_tail_payload`` a descriptor of ring slots within
  its row).
- Qwen4-Exp (linear layers and full-attention layers with a compressed QSA indexer) builds a ``QSATokenToKVPool`` (a
  HybridLinearKVPool): MAMBA, QSA_PENDING (the pre-compression key and RoPE rings, one item per request row) and
  QSA_COMPRESSED (the compressed keys, one item per KV page) (utils.py:1645-1700). Prefill sends them as the slot, the
  request row (``get_qsa_pending_state_indices``) and its KV pages (``_full_kv_pages_payload``).

So the index keys and the compressed keys are digested at the slot id instead of the request's KV pages (another
page's keys, different on the two sides), and the tail and the pending ring at the slot id instead of the request row.

Runs SGLang's own code, unmodified: the pools (``HybridReqToTokenPool`` with its ``MambaPool``;
``HybridLinearKVPool(use_dsa=True)`` with its ``DSATokenToKVPool``, and ``QSATokenToKVPool``, built as the KV cache
configurator builds them), the allocator (``PagedTokenToKVPoolAllocator``), the PD registration
(``get_kv_transfer_buf_infos``, ``setup_state_kv_args``), ``KvChecksumComputer``, prefill's ``send_kv_chunk`` (with
``_send_kv_chunk`` and its state payloads) and decode's ``_verify_kv_checksums``.

Stubbed, because it needs CUDA or a peer: the Adler-32 kernel (a CPU Adler-32 over the same items; ``compute``'s
``is_cuda`` asserts see CPU tensors tagged as on-device), the KV sender (records what ``_send_kv_chunk`` hands it),
the transfer (a byte copy of every sent item onto decode's destination for it, as decode's ``pop_preallocated``
names them; the tail's ring slots as its descriptor names them), decode's one-rank all-reduce and abort hooks. Every
item of both pools first holds another request's bytes, as in a busy server.

Page sizes, as the server sets them: GLM-5.3-Flash 256 (0.5.22 on, 64 * index_kpool; 0.5.21's DSA pool takes 64 only,
so there the same token slots run at page size 64: page p of 256 is pages 4p..4p+3); Qwen4-Exp 64 (compressed QSA).

Exit 1 while the defect is present in either model (a state digest reads items other than those its payload sends -
the DSA tail may also be left out - or decode rejects the byte-exact transfer), 0 on a fixed SGLang.
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
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation import checksum, decode
from sglang.srt.disaggregation.checksum import KvChecksumComputer
from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.utils import (
    get_dsa_tail_state_indices,
    get_kv_transfer_buf_infos,
    setup_state_kv_args,
)
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.common import kv_to_page_indices
from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
from sglang.srt.mem_cache.qsa_kv_pool import QSATokenToKVPool
from sglang.srt.runtime_context import get_parallel

REQUEST_ROWS = 16  # --max-running-requests 16
KPOOL = 4  # GLM-5.3-Flash's index_kpool, with index_kpool_compress
QSA_RATIO = 4  # Qwen4-Exp's QSA compress ratio (the page must be a multiple of it)
# GLM-5.3-Flash's --page-size: 64 * index_kpool from 0.5.22 (arg_groups/model_overrides/deepseek_v2.py); 0.5.21's
# DSA pool takes 64 only. Pages are given at 256 tokens and scaled.
GLM_PAGE = 64 * KPOOL if hasattr(HybridLinearKVPool, "index_page_size") else 64
GLM = SimpleNamespace(
    model="GLM-5.3-Flash", qsa=False, page=GLM_PAGE, scale=256 // GLM_PAGE, prompt=1000,
    chunks=(512, 1000),  # --chunked-prefill-size 512; 4 pages of 256, the last partial
    prefill=dict(pages=[6, 2, 9, 4], slot=5, row=2), decode=dict(pages=[3, 7, 1, 8], slot=3, row=1),
)  # fmt: skip
QWEN = SimpleNamespace(
    model="Qwen4-Exp", qsa=True, page=64, scale=1, prompt=300,  # --page-size 64 (model override); 5 pages
    chunks=(300,),
    prefill=dict(pages=[5, 9, 2, 7, 4], slot=2, row=4), decode=dict(pages=[8, 3, 6, 1, 10], slot=3, row=6),
)  # fmt: skip
BY_PAGE = ("kv", "dsa", "qsa_compressed")  # the kinds held one item per KV page

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
    """One side: the model's hybrid linear pool, its allocator, the request's row and Mamba slot, its PD
    registration."""

    def __init__(self, sc: SimpleNamespace, *, pages: list[int], slot: int, row: int, other: int):
        self.sc, page = sc, sc.page
        self.pages = [sc.scale * p + k for p in pages for k in range(sc.scale)]  # the same token slots at the page
        self.slot, self.row_idx = slot, row
        size = (max(self.pages) + 1) * page
        with get_parallel().override(attn_dcp_size=1):  # the DSA pool sizes its index keys by the DCP width
            shape = Mamba2StateShape.create(
                tp_world_size=1, intermediate_size=32, n_groups=1, num_heads=2, head_dim=16, state_size=8,
                conv_kernel=4,
            )  # fmt: skip
            self.req_to_token_pool = HybridReqToTokenPool(
                size=REQUEST_ROWS, mamba_size=REQUEST_ROWS, mamba_spec_state_size=REQUEST_ROWS,
                max_context_len=len(self.pages) * page, device="cpu", enable_memory_saver=False,
                cache_params=Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0],
                enable_mamba_extra_buffer=True,
            )  # fmt: skip
            # as the KV cache configurator builds them: the DSA tails and the QSA pending rings get one row per
            # request row (req_to_token.shape[0])
            self.request_rows = self.req_to_token_pool.req_to_token.shape[0]
            common = dict(
                size=size, dtype=torch.bfloat16, page_size=page, head_num=1, head_dim=8, full_attention_layer_ids=[1],
                device="cpu", mamba_pool=self.req_to_token_pool.mamba_pool,
            )  # fmt: skip
            if sc.qsa:
                self.pool = QSATokenToKVPool(
                    **common, qsa_index_kv_heads=1, qsa_index_head_dim=16, qsa_compress_ratio=QSA_RATIO,
                    qsa_token_topk=16 * QSA_RATIO, num_request_slots=self.request_rows,
                )  # fmt: skip
            else:
                self.pool = HybridLinearKVPool(
                    **common, use_mla=True, kv_lora_rank=64, qk_rope_head_dim=16, use_dsa=True, index_head_dim=128,
                    kv_cache_dim=80, index_kpool=KPOOL, index_kpool_compress=True, tail_extra_slots=0,
                    max_running_requests=self.request_rows,
                )  # fmt: skip
        self.allocator = PagedTokenToKVPoolAllocator(
            size, page_size=page, dtype=torch.bfloat16, device="cpu", kvcache=self.pool, need_sort=False
        )
        self.req_to_token_pool.req_to_token[row, : len(self.pages) * page] = torch.tensor(
            [p * page + o for p in self.pages for o in range(page)], dtype=torch.int32
        )
        self.req_to_token_pool.req_index_to_mamba_index_mapping[row] = slot  # its Mamba slot, as alloc gives it
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
        for base, item in self.buffers():  # another request's bytes everywhere
            ctypes.memset(base, other, _REGISTERED[base][0])
        self.computer = RecordingChecksumComputer(self.kv_args)

    def buffers(self, kind: str | None = None) -> list[tuple[int, int]]:
        a = self.kv_args
        out = [(int(p), int(i)) for p, i in zip(a.kv_data_ptrs, a.kv_item_lens)] if kind in (None, "kv") else []
        for k, ptrs, items in zip(self.types, a.state_data_ptrs, a.state_item_lens):
            if kind in (None, k):
                out += [(int(p), int(i)) for p, i in zip(ptrs, items)]
        return out

    def fill(self) -> None:
        """The request's bytes as prefill computed them: each KV page and its (compressed) index keys, its Mamba
        state, its QSA pending ring."""
        for k, kind in enumerate(BY_PAGE):
            for b, (base, item) in enumerate(self.buffers(kind)):
                for i, page in enumerate(self.pages):
                    ctypes.memset(base + page * item, (7 * i + 3 * b + 50 * k) % 251 + 1, item)
        for kind, at, byte in (("mamba", self.slot, 200), ("qsa_pending", self.row_idx, 230)):
            for b, (base, item) in enumerate(self.buffers(kind)):
                ctypes.memset(base + at * item, byte + b, item)

    def tail(self) -> list[int]:
        """The tail descriptor this side's _dsa_tail_payload gives (empty when no token is pending compression)."""
        return get_dsa_tail_state_indices(self.pool, self.row_idx, self.sc.prompt)

    @property
    def row(self) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[self.row_idx, : self.sc.prompt]

    def payload_items(self) -> dict[str, list[int]]:
        """Decode's destination items per kind, as its pop_preallocated payloads name them."""
        pages = kv_to_page_indices(self.row, self.sc.page).tolist()
        return {"kv": pages, "mamba": [self.slot], "dsa": pages, "qsa_pending": [self.row_idx], "qsa_compressed": pages}


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
            self.state = [np.asarray(s).reshape(-1).astype(np.int64).tolist() for s in state_indices]


class PrefillScheduler(SchedulerDisaggregationPrefillMixin):
    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.sliding_window_size = None
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
        self.sliding_window_size = None
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


def _copy_tail(src: Engine, dst: Engine, src_desc, dst_desc) -> None:
    """The tail transfer: the ring slots a descriptor [row, start, first_n, 0, second_n, tail_size] names."""
    if not src_desc:
        return
    (s_row, s_start, first_n, s_wrap, second_n, tail_size), (d_row, d_start, _, d_wrap, _, _) = src_desc, dst_desc
    for (sp, n), (dp, _) in zip(src.buffers("dsa_tail"), dst.buffers("dsa_tail")):
        slot = n // tail_size
        for s, d, count in ((s_start, d_start, first_n), (s_wrap, d_wrap, second_n)):
            ctypes.memmove(dp + d_row * n + d * slot, sp + s_row * n + s * slot, count * slot)


def run(sc: SimpleNamespace) -> SimpleNamespace:
    """One model's request through prefill's send_kv_chunk, the transfer, and decode's _verify_kv_checksums."""
    pre = Engine(sc, other=0xA5, **sc.prefill)
    dec = Engine(sc, other=0x5A, **sc.decode)
    pre.fill()

    # prefill: the prompt in its chunks; the last digests [0, prompt) and sends the state payloads
    sender = Sender()
    req = SimpleNamespace(
        rid="r0", origin_input_ids=[0] * sc.prompt, kv=SimpleNamespace(req_pool_idx=pre.row_idx),
        disagg_kv_sender=sender, start_send_idx=0, disagg_decode_prefix_len=0, metadata_buffer_index=0,
    )  # fmt: skip
    psched = PrefillScheduler(pre)
    with get_parallel().override(attn_dcp_size=1):
        for k, end in enumerate(sc.chunks):
            req.extend_end, req.extend_range = end, SimpleNamespace(start=req.start_send_idx, end=end)  # 0.5.21: range
            psched.send_kv_chunk(req, last_chunk=k == len(sc.chunks) - 1)
    sent = dict(zip(pre.types, sender.state))

    # the transfer, item for item, onto decode's destinations as pop_preallocated names them
    dest = dec.payload_items()
    _copy(pre, dec, "kv", sender.kv, dest["kv"])
    for kind in pre.types:
        if kind == "dsa_tail":
            _copy_tail(pre, dec, sent[kind], dec.tail())
        else:
            _copy(pre, dec, kind, sent[kind], dest[kind])

    # decode: verify the prebuilt batch
    aborted: list[str] = []
    dreq = SimpleNamespace(
        rid="r0", bootstrap_room=4242, bootstrap_host="10.0.0.1", bootstrap_port=8998, return_logprob=False,
        kv=SimpleNamespace(req_pool_idx=dec.row_idx, cache_protected_len=0), origin_input_ids=[0] * sc.prompt,
        expected_kv_checksum=psched.digests[0], output_ids=[0],
    )  # fmt: skip
    batch = SimpleNamespace(reqs=[dreq])
    batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
    hooks = {
        "all_reduce_flags": lambda flags, group, op: flags,  # from 0.5.22
        "is_in_ci": lambda: False,
        "prepare_abort": lambda r, msg, **kw: aborted.append(msg),
        "release_kv_cache": lambda *a, **kw: None,
    }
    with get_parallel().override(attn_dcp_size=1), mock.patch.multiple(
        decode, **{k: v for k, v in hooks.items() if hasattr(decode, k)}
    ):
        DecodeScheduler(dec)._verify_kv_checksums(batch)
    kept = len(batch.reqs) == 1 and not aborted

    wrong = False
    for eng in (pre, dec):
        want = eng.payload_items()
        for kind in eng.types:
            if kind == "dsa_tail":  # at the request row, or left out
                wrong |= eng.computer.reads.get(kind) not in ([], [eng.row_idx])
            else:
                wrong |= eng.computer.reads.get(kind) != want[kind]
    return SimpleNamespace(pre=pre, dec=dec, sent=sent, aborted=aborted, present=wrong or not kept)


def _verdict(r: SimpleNamespace) -> str:
    return f"decode aborted the byte-exact transfer: {r.aborted[0]!r}" if r.aborted else "decode kept the request"


def main() -> int:
    logging.getLogger(decode.__name__).setLevel(logging.CRITICAL)
    g, q = run(GLM), run(QWEN)
    gp, gd, qp, qd = g.pre, g.dec, q.pre, q.dec
    gpr, gdr, qpr, qdr = gp.computer.reads, gd.computer.reads, qp.computer.reads, qd.computer.reads
    # the tails have max_running_requests + 1 rows (memory_pool.py), max_running_requests = req_to_token rows
    present = g.present or q.present
    print(
        f"F6 {'REPRODUCED' if present else 'not reproduced'} on SGLang {sglang.__version__} "
        f"({os.path.dirname(sglang.__file__)}), with --disaggregation-enable-kv-checksum. "
        f"(1) GLM-5.3-Flash (a hybrid linear model with DSA layers, index_kpool {KPOOL} with compression) at "
        f"--page-size {GLM.page} registers state components {gp.types}; prefill sends the {GLM.prompt}-token prompt "
        f"(chunks {list(GLM.chunks)}) with its Mamba state at its slot {g.sent['mamba']}, its DSA index keys on its KV "
        f"pages {g.sent['dsa']} and its compression tail by the ring descriptor {g.sent['dsa_tail']} ({GLM.prompt} % "
        f"{KPOOL} = {GLM.prompt % KPOOL} tokens pending compression in its request row {gp.row_idx}). Prefill's digest "
        f"read the dsa items {gpr.get('dsa')} (its KV pages are {gp.payload_items()['dsa']}) and the dsa_tail rows "
        f"{gpr.get('dsa_tail')} (of {gp.request_rows + 1}); "
        f"decode's read dsa {gdr.get('dsa')} (its KV pages are {gd.payload_items()['dsa']}, its Mamba slot {gd.slot}) "
        f"and dsa_tail {gdr.get('dsa_tail')} (its row is {gd.row_idx}); {_verdict(g)}. "
        f"(2) Qwen4-Exp (a hybrid linear model with a compressed QSA indexer, compress ratio {QSA_RATIO}) at "
        f"--page-size {QWEN.page} registers {qp.types}; prefill sends the {QWEN.prompt}-token prompt with its "
        f"Mamba state at its slot {q.sent['mamba']}, its pending key/RoPE ring by its request row "
        f"{q.sent['qsa_pending']} (of {qp.request_rows}) and its compressed keys on its KV pages "
        f"{q.sent['qsa_compressed']}. Prefill's digest read qsa_pending items {qpr.get('qsa_pending')} and "
        f"qsa_compressed {qpr.get('qsa_compressed')}; decode's read qsa_pending {qdr.get('qsa_pending')} (its row is "
        f"{qd.row_idx}, its Mamba slot {qd.slot}) and qsa_compressed {qdr.get('qsa_compressed')} (its KV pages are "
        f"{qd.payload_items()['qsa_compressed']}); {_verdict(q)}. "
        "Expected: each state component digested by the items its payload carries (the Mamba state at the slot, the "
        "index keys and the compressed keys at the KV pages, the pending ring at the request row; the DSA tail, sent "
        "as ring slots within the row, not as items), so a byte-exact transfer verifies."
    )  # fmt: skip
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
