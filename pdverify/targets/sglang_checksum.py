"""The ``kv_checksum`` unit on SGLang: one request's KV handoff with ``--disaggregation-enable-kv-checksum`` through
SGLang's own code on both sides (0.5.21 on, where the checksum came).

SGLang's code that decides a range, a page or a digest runs unmodified:

* decode, retraction (a rebootstrap): the lines of ``Scheduler.pause_generation(mode="retract")`` for a decode
  worker are replayed (pop the boundary token into ``pd_rebootstrap_forced_output_id``, set
  ``pd_rebootstrap_in_progress``); ``DecodePreallocQueue._pre_alloc_fill_len`` gives the length decode registers and
  ``_transfer_page_indices`` (or the release's ``kv_to_page_indices``) its destinations for ``[D, fill)``;
* prefill: the request it receives is a real ``Req`` - for a rebootstrap built from decode's own
  ``Req.build_rebootstrap_payload`` - and each chunk goes through ``SchedulerDisaggregationPrefillMixin.send_kv_chunk``
  (the last one digests: ``page_indices_for_request``, ``state_indices_for_request``, ``KvChecksumComputer.compute``,
  SGLang's ``adler32_strided_checksum`` and its address arithmetic ``base + id * item_len``);
* the request's metadata row: prefill's ``set_buf`` and ``set_kv_checksum`` write it into SGLang's own
  ``MetadataBuffers`` (slot ``prefill_aux_index``; the first token, the bootstrap room, the digest), and
  ``MooncakeKVManager.send_aux`` copies each registered buffer's row into decode's ``MetadataBuffers`` (slot
  ``decode_aux_index``);
* decode: ``DecodeTransferQueue.pop_transferred`` polls the request - its receiver reports the transfer done - through
  the metadata gate and ``poll_and_all_reduce`` over a one-rank gloo group, and commits it
  (``_commit_transfer_to_req`` re-arms ``expected_kv_checksum`` from the row, checks the room, replays the boundary
  token) or does not (F8: room 0); then ``SchedulerDisaggregationDecodeMixin._verify_kv_checksums`` on the prebuilt
  batch.

Stood in for: the CUDA kernel under ``adler32_strided_checksum`` (a CPU Adler-32 over the bytes at the addresses
SGLang computed, which also reads back which page of which registered buffer each address names) and the
``is_cuda`` checks on the index tensors; the KV sender (records each send) and the transfer (a byte copy of each
sent page onto its destination, as Mooncake's page-granular transfer; the aux row's engine likewise); decode's
one-rank all-reduce of the mismatch flags and the abort plumbing (recorded).
Each side's KV buffer is real CPU memory: prefill's pages hold their logical page's bytes, decode's prefix pages the
same (its tree computed them), its other pages zeros until the transfer.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import traceback
import zlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from pdverify.model.checksum import (
    MAX_MAMBA_SLOT,
    MAX_REQUEST_ROW,
    METADATA_BUFFER_SLOTS,
    QSA_COMPRESS_RATIO,
    ChecksumCase,
    ChecksumTrace,
)
from pdverify.targets.sglang_prefill import _extend_range, on_device
from pdverify.targets.sglang_transfer_queue import aux_transfer, decode_transfer_queue, released

SIGNATURE = 0x5EED
"""The KV-layout signature both sides share where the release has no ``kv_layout_signature`` (one model, one
layout)."""
KV_DTYPES = {"auto": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "mxfp8": torch.float8_e4m3fn}
"""The pool's dtype for each ``--kv-cache-dtype`` (``auto``: the model's bfloat16)."""


class OutOfBounds(AssertionError):
    """A digest read an address outside every buffer its engines registered."""


class _Buffers:
    """Every buffer both engines register for the transfer and the digest: base -> (bytes, item length, engine,
    kind), kind ``"kv"`` or the state type it was registered under (``"swa"``, ``"block_scale"``, ...)."""

    def __init__(self) -> None:
        self.by_base: dict[int, tuple[int, int, Any, str]] = {}

    def register(self, engine: Any, kind: str, ptrs: list[int], lens: list[int], items: list[int]) -> None:
        for ptr, nbytes, item in zip(ptrs, lens, items, strict=True):
            self.by_base[int(ptr)] = (int(nbytes), int(item), engine, kind)

    def item(self, address: int, length: int) -> tuple[int, int]:
        """(base, item) that ``address`` names; an address on no buffer's item grid (past a buffer's end, in no
        buffer or into the next one) is an out-of-bounds read."""
        for base, (nbytes, item, _, _) in self.by_base.items():
            offset = address - base
            if 0 <= offset < nbytes and offset % item == 0 and length == item and offset + length <= nbytes:
                return base, offset // item
        raise OutOfBounds(
            f"the digest read {length} bytes at address {address}, on no registered buffer's item grid (on a GPU: "
            "an out-of-bounds device read)"
        )


def _engine(sg: Any, case: ChecksumCase, buffers: _Buffers, side: str, row: int) -> Any:
    """One engine as the server builds it for ``--kv-cache-dtype`` and the model: SGLang's own KV pool (an MHA
    model's, ``_mha_pool``; a DSA or hybrid linear model's, ``_state_pool``), its allocator
    (``PagedTokenToKVPoolAllocator``, ``SWATokenToKVPoolAllocator``) and request-to-token pool with the request's row
    on the side's pages (and its SWA pages in ``full_to_swa_index_mapping``, its Mamba slot in
    ``req_index_to_mamba_index_mapping``); its PD registration (``get_kv_transfer_buf_infos``,
    ``setup_state_kv_args``) decides the buffers its checksum computer digests. Every item holds another request's
    bytes (the side's own) until the request's pages are filled."""
    ps, dtype = case.page_size, KV_DTYPES[case.kv_cache_dtype]
    pages: tuple[int, ...] = getattr(case, f"{side}_pages")
    swa_pages: tuple[int, ...] = getattr(case, f"{side}_swa_pages")
    # page ids 1..max; the pool adds the padding page 0. A hybrid SWA pool's SWA part is no larger than its full part
    # (--swa-full-tokens-ratio, 0.8 by default)
    size = max(pages + swa_pages) * ps
    slot: int = getattr(case, f"{side}_mamba_slot")
    if case.mamba:  # a server's pool holds many more pages than Mamba slots: every slot id names a page too
        size = max(size, (MAX_MAMBA_SLOT + 1) * ps)
        rows = _mamba_rows(sg, case, row, slot, context=len(pages) * ps)
    else:
        rows = sg.memory_pool.ReqToTokenPool(size=row + 1, max_context_len=len(pages) * ps, device="cpu",
                                             enable_memory_saver=False)  # fmt: skip
    if case.kv_pool == "mha":
        pool, allocator = _mha_pool(sg, case, size, pages, swa_pages)
    else:
        pool, allocator = _state_pool(sg, case, size, rows), None
    if allocator is None:  # every pool but a hybrid SWA one pages through the paged allocator
        allocator = sg.PagedTokenToKVPoolAllocator(size, page_size=ps, dtype=dtype, device="cpu", kvcache=pool,
                                                   need_sort=True)  # fmt: skip
    rows.req_to_token[row, : len(pages) * ps] = torch.tensor([p * ps + o for p in pages for o in range(ps)],
                                                             dtype=torch.int32)  # fmt: skip
    kv_args = SimpleNamespace()
    kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = sg.utils.get_kv_transfer_buf_infos(pool)
    sg.utils.setup_state_kv_args(kv_args, pool, None, req_to_token_pool=rows)
    engine = SimpleNamespace(pool=pool, allocator=allocator, req_to_token_pool=rows, kv_args=kv_args, row=row,
                             reads=[], pages=pages, swa_pages=swa_pages, sliding_window=case.sliding_window or None,
                             slot=slot,
                             types=[getattr(t, "value", t) for t in kv_args.state_types])  # fmt: skip
    buffers.register(engine, "kv", kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens)
    for kind, ptrs, lens, items in zip(engine.types, kv_args.state_data_ptrs, kv_args.state_data_lens,
                                       kv_args.state_item_lens, strict=True):  # fmt: skip
        buffers.register(engine, kind, list(ptrs), list(lens), list(items))
    for base, (nbytes, _, owner, _) in buffers.by_base.items():  # another request's bytes everywhere
        if owner is engine:
            ctypes.memset(base, 0xA5 if side == "prefill" else 0x5A, nbytes)
    engine.signature = SIGNATURE
    if hasattr(sg.utils, "kv_layout_signature"):  # 0.5.23: each side's own, as _init_kv_manager registers it
        kv_args.page_size, kv_args.kv_cache_dtype_str = ps, case.kv_cache_dtype
        kv_args.kv_layout = sg.utils.get_pd_kv_layout(pool) if hasattr(sg.utils, "get_pd_kv_layout") else None
        engine.signature = sg.utils.kv_layout_signature(kv_args)
    return engine


def _mha_pool(
    sg: Any, case: ChecksumCase, size: int, pages: tuple[int, ...], swa_pages: tuple[int, ...]
) -> tuple[Any, Any]:
    """An MHA model's pool: ``MHATokenToKVPool`` (``MHATokenToKVPoolMXFP8`` for ``mxfp8``), or for a sliding window
    ``SWAKVPool`` over two of them with its own allocator, the row's SWA slots in ``full_to_swa_index_mapping``
    (None: the paged allocator)."""
    ps, dtype = case.page_size, KV_DTYPES[case.kv_cache_dtype]
    mxfp8 = case.kv_cache_dtype == "mxfp8"
    pool_class = sg.memory_pool.MHATokenToKVPoolMXFP8 if mxfp8 else sg.memory_pool.MHATokenToKVPool
    shape = {"page_size": ps, "dtype": dtype, "head_num": 1, "head_dim": 32 if mxfp8 else 8, "device": "cpu",
             "enable_memory_saver": False, "enable_alt_stream": False}  # fmt: skip
    if not case.sliding_window:
        return pool_class(size=size, layer_num=2, **shape), None
    size_swa = max(swa_pages) * ps
    pool = sg.SWAKVPool(size=size, size_swa=size_swa, swa_attention_layer_ids=[0], full_attention_layer_ids=[1],
                        token_to_kv_pool_class=pool_class, **shape)  # fmt: skip
    allocator = sg.SWATokenToKVPoolAllocator(size, size_swa, ps, dtype, "cpu", pool, need_sort=True)
    for full, swa in zip(pages, swa_pages, strict=True):  # the row's SWA slots (state injection)
        allocator.full_to_swa_index_mapping[full * ps : (full + 1) * ps] = torch.arange(swa * ps, (swa + 1) * ps)
    return pool, allocator


def _mamba_rows(sg: Any, case: ChecksumCase, row: int, slot: int, context: int) -> Any:
    """A hybrid linear model's ``HybridReqToTokenPool`` (a Mamba2 layer - GLM-5.3-Flash's KDA state differs in shape
    only; the extra buffer past page size 1) with the row's Mamba slot in ``req_index_to_mamba_index_mapping``."""
    shape = sg.Mamba2StateShape.create(tp_world_size=1, intermediate_size=32, n_groups=1, num_heads=2, head_dim=16,
                                       state_size=8, conv_kernel=4)  # fmt: skip
    rows = sg.memory_pool.HybridReqToTokenPool(
        size=REQUEST_ROWS, mamba_size=slot, mamba_spec_state_size=slot, max_context_len=context, device="cpu",
        enable_memory_saver=False, cache_params=sg.Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0],
        enable_mamba_extra_buffer=case.page_size > 1,
    )  # fmt: skip
    rows.req_index_to_mamba_index_mapping[row] = slot
    return rows


def _state_pool(sg: Any, case: ChecksumCase, size: int, rows: Any) -> Any:
    """A DSA or hybrid linear model's pool, as the KV cache configurator builds it: ``DSATokenToKVPool`` (MLA
    latents and the indexer's keys); ``HybridLinearKVPool`` over ``rows`` (``_mamba_rows``) with an MHA or, ``use_dsa``,
    a DSA full-attention layer (``index_kpool`` > 1: compressed, with per-request tails); ``QSATokenToKVPool``
    (Qwen4-Exp's compressed QSA indexer, its pending ring one item per request row); or ``MiniMaxSparseKVPool``
    (MiniMax-M3: a dense layer and a K-only sparse layer with its indexer's keys - the sparse layers PD registers)."""
    ps, kpool = case.page_size, case.dsa_index_kpool
    dsa = {"kv_lora_rank": 64, "qk_rope_head_dim": 16, "index_head_dim": 128, "kv_cache_dim": 80,
           "index_kpool": kpool, "index_kpool_compress": kpool > 1}  # fmt: skip
    if case.kv_pool == "minimax":
        return sg.memory_pool.MiniMaxSparseKVPool(size=size, page_size=ps, dtype=KV_DTYPES[case.kv_cache_dtype],
                                                  head_num=1, head_dim=8, idx_head_dim=16, dense_layer_ids=[0],
                                                  sparse_layer_ids=[1], disable_value_sparse_layer_ids=[1],
                                                  device="cpu", enable_memory_saver=False, start_layer=0,
                                                  end_layer=2)  # fmt: skip
    if case.kv_pool == "dsa":
        return sg.memory_pool.DSATokenToKVPool(size=size, page_size=ps, dtype=torch.bfloat16, layer_num=2,
                                               device="cpu", enable_memory_saver=False, **dsa)  # fmt: skip
    common = {"size": size, "dtype": KV_DTYPES[case.kv_cache_dtype], "page_size": ps, "head_num": 1, "head_dim": 8,
              "full_attention_layer_ids": [1], "device": "cpu", "mamba_pool": rows.mamba_pool}  # fmt: skip
    request_rows = rows.req_to_token.shape[0]  # _build_hybrid_linear_kv_pool: max_running_requests, request slots
    if case.kv_pool == "mamba_qsa":
        qsa = {"qsa_index_kv_heads": 1, "qsa_index_head_dim": 16, "qsa_compress_ratio": QSA_COMPRESS_RATIO,
               "qsa_token_topk": 16 * QSA_COMPRESS_RATIO, "num_request_slots": request_rows}  # fmt: skip
        return sg.QSATokenToKVPool(**common, **qsa)
    if case.kv_pool == "mamba_dsa":
        tails = {"tail_extra_slots": 0, "max_running_requests": request_rows} if kpool > 1 else {}
        return sg.memory_pool.HybridLinearKVPool(**common, use_mla=True, use_dsa=True, **dsa, **tails)
    return sg.memory_pool.HybridLinearKVPool(**common)


REQUEST_ROWS = MAX_REQUEST_ROW + 1
"""A hybrid linear engine's request rows (``--max-running-requests``; row 0 pads): its compression tail has one
more."""
SWA_INDEXED = ("swa", "block_scale_swa")
"""The state types addressed by SWA pages (``REQUEST_SCOPED`` by the request, the others by full pages)."""
REQUEST_SCOPED = ("mamba", "dsa_tail", "qsa_pending")
"""The state types held per request, not per page: the Mamba slot, the DSA compression tail's row, the QSA pending
ring's row."""


def _buffers_of(engine: Any, kind: str) -> list[tuple[int, int]]:
    """(base, item length) of each buffer the engine registered of ``kind`` (``"kv"`` or a state type)."""
    a = engine.kv_args
    if kind == "kv":
        return list(zip(a.kv_data_ptrs, a.kv_item_lens, strict=True))
    at = engine.types.index(kind)
    return list(zip(a.state_data_ptrs[at], a.state_item_lens[at], strict=True))


def _fill(engine: Any, logical: range) -> None:
    """Each buffer's item for logical page ``i`` (its full page, or its SWA page for SWA-indexed state) holds that
    page's bytes (the same on both sides)."""
    for k, kind in enumerate(["kv", *engine.types]):
        if kind in REQUEST_SCOPED:
            continue
        ids = engine.swa_pages if kind in SWA_INDEXED else engine.pages
        for b, (base, item) in enumerate(_buffers_of(engine, kind)):
            for i in logical:
                ctypes.memset(int(base) + ids[i] * int(item), (7 * i + 3 * b + 50 * k) % 251 + 1, int(item))


def _fill_state(engine: Any) -> None:
    """The request's Mamba state in the engine's slot and a QSA indexer's pending ring in its request row (as
    prefill computed them after the request's last token)."""
    for kind, at, byte in (("mamba", engine.slot, 200), ("qsa_pending", engine.row, 230)):
        if kind in engine.types:
            for b, (base, item) in enumerate(_buffers_of(engine, kind)):
                ctypes.memset(int(base) + at * int(item), byte + b, int(item))


def _copy(src: Any, dst: Any, kind: str, src_items: list[int], dst_items: list[int]) -> None:
    """The transfer: item ``src_items[i]`` of each of prefill's buffers of ``kind`` onto ``dst_items[i]`` of decode's
    peer buffer (Mooncake's page-granular copy)."""
    for (sp, n), (dp, _) in zip(_buffers_of(src, kind), _buffers_of(dst, kind), strict=True):
        for s, d in zip(src_items, dst_items, strict=True):
            ctypes.memmove(int(dp) + int(d) * int(n), int(sp) + int(s) * int(n), int(n))


def _computer(sglang: Any, engine: Any) -> Any:
    class Computer(sglang.KvChecksumComputer):  # type: ignore[misc, name-defined, unused-ignore]
        def compute(self, kv_page_indices_gpu: Any, state_indices_gpu: Any = None) -> int:
            engine.reads.append(())
            return int(super().compute(on_device(kv_page_indices_gpu), on_device(state_indices_gpu)))

    a = engine.kv_args  # as PrefillBootstrapQueue / DecodePreallocQueue build it from their kv_args
    return Computer(torch.device("cpu"), kv_data_ptrs=a.kv_data_ptrs, kv_item_lens=a.kv_item_lens,
                    state_data_ptrs=a.state_data_ptrs, state_item_lens=a.state_item_lens)  # fmt: skip


@contextlib.contextmanager
def _cpu_kernel(adler32: Any, buffers: _Buffers, engines: list[Any]) -> Iterator[None]:
    """SGLang's ``adler32_strided_checksum`` with its JIT module on CPU: the addresses SGLang computed are read as
    bytes, and each is traced back to the item of the registered buffer it is in; the engine whose digest is under
    way gets the (base, item) list."""

    class CpuKernel:
        def adler32_strided(self, ptrs: Any, lens: Any, states: Any, total: int) -> None:
            parts, items = [], []
            for address, length in zip(ptrs.tolist(), lens.tolist(), strict=True):
                items.append(buffers.item(int(address), int(length)))
                parts.append(ctypes.string_at(int(address), int(length)))
            for engine in engines:
                if engine.reads and engine.reads[-1] == ():
                    engine.reads[-1] = tuple(items)
            states[0] = zlib.adler32(b"".join(parts))

        def adler32_reduce(self, states: Any, result: Any, n: int) -> None:
            result[0] = states[0]

    with mock.patch.object(adler32, "_jit_adler32_module", lambda: CpuKernel()):
        yield


def _modules() -> Any:  # pragma: no cover - conformance venv
    """The SGLang modules and classes the driver calls (imported at the first call: nothing of SGLang at import)."""
    from sglang.kernels.ops.memory import adler32
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.disaggregation import decode, prefill, utils
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.checksum import KvChecksumComputer
    from sglang.srt.disaggregation.decode import (
        DecodePreallocQueue,
        DecodeRequest,
        DecodeTransferQueue,
        SchedulerDisaggregationDecodeMixin,
    )
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache import memory_pool
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.qsa_kv_pool import QSATokenToKVPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.sampling.sampling_params import SamplingParams

    return SimpleNamespace(
        adler32=adler32,
        decode=decode,
        prefill=prefill,
        KvChecksumComputer=KvChecksumComputer,
        KVPoll=KVPoll,
        MetadataBuffers=MetadataBuffers,
        MooncakeKVManager=MooncakeKVManager,
        ReqToMetadataIdxAllocator=ReqToMetadataIdxAllocator,
        DecodePreallocQueue=DecodePreallocQueue,
        DecodeRequest=DecodeRequest,
        DecodeTransferQueue=DecodeTransferQueue,
        SchedulerDisaggregationDecodeMixin=SchedulerDisaggregationDecodeMixin,
        SchedulerDisaggregationPrefillMixin=SchedulerDisaggregationPrefillMixin,
        Req=Req,
        utils=utils,
        memory_pool=memory_pool,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator,
        SWATokenToKVPoolAllocator=SWATokenToKVPoolAllocator,
        SWAKVPool=SWAKVPool,
        SamplingParams=SamplingParams,
        Mamba2CacheParams=Mamba2CacheParams,
        Mamba2StateShape=Mamba2StateShape,
        QSATokenToKVPool=QSATokenToKVPool,
    )


def _req(sglang: Any, rid: str, input_ids: list[int], room: int) -> Any:
    return sglang.Req(rid, "", list(input_ids), sglang.SamplingParams(max_new_tokens=4096),
                      bootstrap_host="10.0.0.1", bootstrap_port=8998, bootstrap_room=room)  # fmt: skip


def _single_rank() -> contextlib.AbstractContextManager[Any]:
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:  # pragma: no cover - no runtime context in this release
        return contextlib.nullcontext()
    return get_parallel().override(attn_dcp_size=1)  # type: ignore[no-any-return, unused-ignore]


def sglang_kv_checksum(case: ChecksumCase, device: str) -> ChecksumTrace:  # pragma: no cover - conformance venv
    """One request's KV handoff with the checksum on, through SGLang's own code on both sides (module doc)."""
    del device  # SGLang's KV buffers here are host memory; the index tensors stay on CPU
    sg = _modules()
    ps, d = case.page_size, case.decode_prefix
    buffers = _Buffers()
    with _single_rank():  # a DSA pool sizes its index buffer by the decode-context-parallel width
        pre = _engine(sg, case, buffers, "prefill", row=case.prefill_row)
        dec = _engine(sg, case, buffers, "decode", row=case.decode_row)
    _fill(pre, range(len(case.prefill_pages)))  # each page holds its logical page's bytes
    _fill_state(pre)
    _fill(dec, range(d // ps))  # decode's tree holds the prefix: the same bytes, computed there

    # decode: the request, and a retraction after its outputs (Scheduler.pause_generation, mode="retract")
    dreq = _req(sg, "r0", [1000 + i for i in range(case.prompt)], case.bootstrap_room)
    if case.rebootstrap:
        dreq.output_ids.extend(2000 + i for i in range(case.outputs + 1))
        dreq.pd_rebootstrap_forced_output_id = dreq.output_ids.pop()
        dreq.pd_rebootstrap_in_progress = True
    fill = sg.DecodePreallocQueue._pre_alloc_fill_len(dreq)
    if fill != case.length:
        raise AssertionError(f"decode registers {fill} tokens for a case of {case.length}")
    dreq.kv.req_pool_idx = dec.row
    dreq.kv.kv_committed_len = fill
    dreq.kv.cache_protected_len = d
    receiver = SimpleNamespace(poll=lambda: int(sg.KVPoll.Success), clear=lambda: None)  # the transfer is done
    decode_req = sg.DecodeRequest(req=dreq, kv_receiver=receiver, is_rebootstrap=case.rebootstrap,
                                  metadata_buffer_index=case.decode_aux_index)  # fmt: skip
    decode_row = dec.req_to_token_pool.req_to_token[dec.row]

    def pages_of(slots: torch.Tensor) -> list[int]:
        if hasattr(sg.DecodePreallocQueue, "_transfer_page_indices"):  # the queue itself is not read
            return [int(p) for p in sg.DecodePreallocQueue._transfer_page_indices(None, decode_req, slots, ps).tolist()]
        return [int(p) for p in sg.decode.kv_to_page_indices(slots.numpy(), ps).tolist()]

    destinations = tuple(pages_of(decode_row[d:fill]))
    # decode's state destinations, as pop_preallocated's payloads name them: BLOCK_SCALE its pages of [0, fill)
    # (_full_kv_pages_payload), SWA and BLOCK_SCALE_SWA its SWA pages of the window (_swa_payload), DSA its pages
    # past the prefix (_dsa_pages_payload; from 0 before 0.5.23), MAMBA its slot (_mamba_payload), QSA_PENDING its
    # request row (_qsa_pending_payload), QSA_COMPRESSED and MINIMAX_DENSE_KV its pages of [0, fill), MINIMAX_INDEX_K
    # its pages past the prefix (_minimax_payload; from 0 before 0.5.23); DSA_TAIL's ring slots are not copied (a
    # descriptor, not items: the digest must not read them)
    dsa_from = d if hasattr(sg.decode, "suffix_page_indices") else 0  # 0.5.21-0.5.22: _full_kv_pages_payload
    index_k_from = d if hasattr(sg.decode, "minimax_index_transfer_pages") else 0
    full = pages_of(decode_row[:fill])
    landing: dict[str, list[int]] = {"block_scale": full, "dsa": pages_of(decode_row[dsa_from:fill]),
                                     "mamba": [dec.slot], "qsa_pending": [dec.row], "qsa_compressed": full,
                                     "minimax_index_k": pages_of(decode_row[index_k_from:fill]),
                                     "minimax_dense_kv": full}  # fmt: skip
    if case.sliding_window:
        start = max(d, fill - case.sliding_window) // ps * ps
        window = dec.allocator.translate_swa_indices_for_transfer(decode_row[start:fill])
        landing["swa"] = landing["block_scale_swa"] = pages_of(window)

    # prefill: the request it receives (decode's rebootstrap payload, or the prompt), chunk by chunk
    ids = dreq.build_rebootstrap_payload()["input_ids"] if case.rebootstrap else list(dreq.origin_input_ids)
    preq = _req(sg, "r0", ids, case.bootstrap_room)
    preq.kv.req_pool_idx = pre.row
    preq.disagg_decode_prefix_len = preq.start_send_idx = d
    preq.metadata_buffer_index = case.prefill_aux_index
    preq.output_ids = [HANDOFF_TOKEN]  # the first token prefill sampled, which set_buf writes into the row
    sends: list[tuple[list[int], Any]] = []

    def send(kv_indices: Any, state_indices: Any = None, *args: Any, **kwargs: Any) -> None:
        sends.append(([int(p) for p in kv_indices], state_indices))

    preq.disagg_kv_sender = SimpleNamespace(
        supports_host_tensor_indices=False,
        get_max_transfer_tokens=lambda: None,
        should_send_kv_chunk=lambda num_pages, last_chunk: num_pages > 0 or last_chunk,
        send=send,
    )
    prefill_rows, decode_rows = _metadata_buffers(sg), _metadata_buffers(sg)
    psched = _PrefillScheduler(sg, pre, prefill_rows)
    dsched = _DecodeScheduler(sg, dec)
    engines = [pre, dec]
    ends = list(case.chunk_ends)
    with _single_rank(), _cpu_kernel(sg.adler32, buffers, engines):
        start = d
        try:
            for k, end in enumerate(ends):
                preq.extend_end, preq.extend_range = end, _extend_range(start, end)
                psched.send_kv_chunk(preq, last_chunk=k == len(ends) - 1)
                start = end
        except AssertionError as exc:  # an assert in the scheduler loop takes the prefill server down
            sent = tuple(p for s, _ in sends for p in s)
            return ChecksumTrace((), sent, destinations, (), False, raised=f"prefill: {_where(exc)}")
        sent = tuple(p for s, _ in sends for p in s)
        sent_state = _state_payloads(pre, sends)
        if len(sent) != len(destinations):
            raise AssertionError(f"prefill sent {len(sent)} pages for {len(destinations)} destinations")
        _copy(pre, dec, "kv", list(sent), list(destinations))  # the transfer: whole pages
        for kind, items in sent_state:  # each state payload onto decode's destinations for it
            if kind == "dsa_tail":
                continue
            if len(items) != len(landing[kind]):
                raise AssertionError(f"prefill sent {len(items)} {kind} items for {len(landing[kind])} destinations")
            _copy(pre, dec, kind, list(items), landing[kind])
        aux_transfer(sg, "mooncake", prefill_rows, decode_rows, case.prefill_aux_index, case.decode_aux_index)

        token = dreq.pd_rebootstrap_forced_output_id if case.rebootstrap else HANDOFF_TOKEN
        committed = _pop_transferred(sg, dsched, decode_rows, decode_req, token)
        if committed is not None:
            prefill_read = pre.reads[0] if pre.reads else ()
            return ChecksumTrace(_pages(buffers, pre, prefill_read, "kv"), sent, destinations, (), False, committed,
                                 prefill_state_digest=_state_read(buffers, pre, prefill_read), sent_state=sent_state,
                                 committed=False)  # fmt: skip
        dreq.pd_rebootstrap_in_progress = False  # prepare_for_prebuilt clears it before the batch is verified
        aborted: list[str] = []
        batch = SimpleNamespace(reqs=[dreq])
        batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
        with contextlib.ExitStack() as stack:
            for name, value in (
                ("all_reduce_flags", lambda flags, group, op: flags),
                ("is_in_ci", lambda: False),
                ("prepare_abort", lambda req, msg, **kw: aborted.append(msg)),
                ("release_kv_cache", lambda *a, **kw: None),
            ):
                if hasattr(sg.decode, name):
                    stack.enter_context(mock.patch.object(sg.decode, name, value))
            try:
                dsched._verify_kv_checksums(batch)
            except AssertionError as exc:
                prefill_read = pre.reads[0] if pre.reads else ()
                return ChecksumTrace(_pages(buffers, pre, prefill_read, "kv"), sent, destinations, (), False,
                                     prefill_state_digest=_state_read(buffers, pre, prefill_read),
                                     sent_state=sent_state, raised=f"decode: {_where(exc)}")  # fmt: skip
    if len(pre.reads) != 1 or len(dec.reads) != 1:
        raise AssertionError(f"digests: prefill {len(pre.reads)}, decode {len(dec.reads)} (one each expected)")
    kept = len(batch.reqs) == 1 and not aborted
    p_read, d_read = pre.reads[0], dec.reads[0]
    return ChecksumTrace(
        _pages(buffers, pre, p_read, "kv"), sent, destinations, _pages(buffers, dec, d_read, "kv"), kept,
        "; ".join(aborted), _state_read(buffers, pre, p_read), _state_read(buffers, dec, d_read), sent_state,
    )  # fmt: skip


def _state_payloads(engine: Any, sends: list[tuple[list[int], Any]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Per registered state type, the items prefill's sends carried for it (empty without state)."""
    carried: dict[str, list[int]] = {kind: [] for kind in engine.types}
    for _, state in sends:
        for kind, items in zip(engine.types, state or [None] * len(engine.types), strict=True):
            if items is not None:
                carried[kind] += _ints(items)
    return tuple((kind, tuple(items)) for kind, items in carried.items())


def _ints(items: Any) -> list[int]:
    """A payload's indices as ints: a tensor, an array, or a list of them (``_mamba_payload``: one 0-d array)."""
    if isinstance(items, (list, tuple)):
        return [i for part in items for i in _ints(part)]
    return [int(p) for p in torch.as_tensor(items).reshape(-1).tolist()]


def _state_read(buffers: _Buffers, engine: Any, read: tuple[tuple[int, int], ...]) -> tuple[Any, ...]:
    """Per registered state type, the items of the engine's buffers of that type a digest read."""
    return tuple((kind, _pages(buffers, engine, read, kind)) for kind in engine.types)


def _where(exc: BaseException) -> str:
    """``AssertionError at checksum.py:120 `assert state_indices_gpu is not None```: where SGLang raised."""
    if isinstance(exc, OutOfBounds):
        return str(exc)
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {os.path.basename(frame.filename)}:{frame.lineno} `{frame.line}`"


def _pages(buffers: _Buffers, engine: Any, read: tuple[tuple[int, int], ...], kind: str) -> tuple[int, ...]:
    """The items a digest read of the engine's buffers of ``kind``: every such buffer must have read the same items,
    and none of another engine's."""
    per_buffer: dict[int, list[int]] = {}
    for base, item in read:
        _, _, owner, owner_kind = buffers.by_base[base]
        if owner is not engine:
            raise AssertionError("a digest read another engine's buffer")
        if owner_kind == kind:
            per_buffer.setdefault(base, []).append(item)
    mine = [b for b, (_, _, owner, k) in buffers.by_base.items() if owner is engine and k == kind]
    seen = {tuple(per_buffer.get(b, [])) for b in mine}
    if len(seen) > 1:
        raise AssertionError(f"the digest read different items of the {kind} buffers: {sorted(seen)}")
    return seen.pop() if seen else ()


class _PrefillScheduler:  # pragma: no cover - conformance venv
    """The prefill scheduler's state ``send_kv_chunk`` reads (the real ``Scheduler.__init__`` is skipped)."""

    def __new__(cls, sg: Any, engine: Any, metadata: Any) -> Any:
        sched = sg.SchedulerDisaggregationPrefillMixin.__new__(
            type("PrefillScheduler", (sg.SchedulerDisaggregationPrefillMixin,), {})
        )
        sched.token_to_kv_pool_allocator = engine.allocator
        sched.req_to_token_pool = engine.req_to_token_pool
        sched.kv_checksum_computer = _computer(sg, engine)
        sched.sliding_window_size = engine.sliding_window
        sched.enable_staging = False
        sched.disagg_prefill_pending_chunk_rids = set()
        sched.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=engine.signature, kv_manager=SimpleNamespace(kv_args=engine.kv_args)
        )
        sched.disagg_metadata_buffers = metadata  # SGLang's own: set_buf and set_kv_checksum write the request's row
        return sched


class _DecodeScheduler:  # pragma: no cover - conformance venv
    """The decode scheduler's state ``_verify_kv_checksums`` reads."""

    def __new__(cls, sg: Any, engine: Any) -> Any:
        sched = sg.SchedulerDisaggregationDecodeMixin.__new__(
            type("DecodeScheduler", (sg.SchedulerDisaggregationDecodeMixin,), {})
        )
        sched.token_to_kv_pool_allocator = engine.allocator
        sched.req_to_token_pool = engine.req_to_token_pool
        sched.kv_checksum_computer = _computer(sg, engine)
        sched.sliding_window_size = engine.sliding_window
        sched.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True),
            kv_checksum_signature=engine.signature,
        )
        sched.attn_tp_cpu_group = None
        sched.tree_cache = None
        sched.enable_decode_hicache = sched.enable_hisparse = False
        sched.output_streamer = SimpleNamespace(stream_output=lambda reqs, return_logprob: None)
        sched.metrics_reporter = SimpleNamespace(enable_metrics=False)
        sched.batch_result_processor = SimpleNamespace(_maybe_update_reasoning_tokens=lambda req, token: None)
        sched.spec_algorithm = SimpleNamespace(is_none=lambda: True)
        return sched


HANDOFF_TOKEN = 31337
"""The first output token prefill sampled: ``set_buf`` writes it into the request's metadata row."""
POLLS = 3
"""The polls decode's transfer queue is given to commit a transferred request whose row has landed (it needs one)."""


def _metadata_buffers(sg: Any) -> Any:  # pragma: no cover - conformance venv
    """One side's ``MetadataBuffers`` with the checksum row (CPU-resident by design; ``METADATA_BUFFER_SLOTS`` rows)."""
    return sg.MetadataBuffers(METADATA_BUFFER_SLOTS, hidden_size=16, hidden_states_dtype=torch.bfloat16,
                              max_sampling_mask_tokens=16, kv_checksum_enabled=True)  # fmt: skip


def _pop_transferred(sg: Any, dsched: Any, rows: Any, decode_req: Any, token: int) -> str | None:  # pragma: no cover
    """Decode's transfer queue, SGLang's own ``pop_transferred``, polled up to ``POLLS`` times with the request's
    receiver reporting the transfer done: None once it commits the request with ``token`` (prefill's first token, or
    a rebootstrap's replayed boundary token), else why not."""
    # decode's own rows: the digest, first token and room as prefill's row landed; an aborted request's release (the
    # corruption check) gives its lock and KV back to the tree, recorded as nothing
    tree_cache = SimpleNamespace(unlock=lambda *a, **kw: None, finish=lambda *a, **kw: None)
    queue = decode_transfer_queue(sg, dsched, rows, [decode_req], METADATA_BUFFER_SLOTS, tree_cache)
    for _ in range(POLLS):
        with released(sg):
            done = queue.pop_transferred()
        if done:
            if [r.rid for r in done] != [decode_req.req.rid]:
                raise AssertionError(f"pop_transferred returned {[r.rid for r in done]} for {decode_req.req.rid}")
            last = int(decode_req.req.output_ids[-1])
            return None if last == token else f"decode committed the first token {last}, prefill's is {token}"
        if not queue.queue:  # left the queue without being committed: aborted
            return f"decode aborted the request: {getattr(decode_req.req.finished_reason, 'message', '?')}"
    row = [int(v) for v in rows.bootstrap_room[decode_req.metadata_buffer_index, :2].tolist()]
    return (
        f"still in DecodeTransferQueue.queue after {POLLS} pop_transferred polls, though its receiver reports the "
        f"transfer done and prefill's row landed (bootstrap_room row {row})"
    )
