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
* decode: ``DecodeTransferQueue._commit_transfer_to_req`` (re-arms ``expected_kv_checksum`` from the metadata, replays
  the boundary token), then ``SchedulerDisaggregationDecodeMixin._verify_kv_checksums`` on the prebuilt batch.

Stood in for: the CUDA kernel under ``adler32_strided_checksum`` (a CPU Adler-32 over the bytes at the addresses
SGLang computed, which also reads back which page of which registered buffer each address names) and the
``is_cuda`` checks on the index tensors; the KV sender (records each send) and the transfer (a byte copy of each
sent page onto its destination, as Mooncake's page-granular transfer); the metadata buffer (prefill's digest and
signature handed to decode); decode's one-rank all-reduce of the mismatch flags and the abort plumbing (recorded).
Each side's KV buffer is real CPU memory: prefill's pages hold their logical page's bytes, decode's prefix pages the
same (its tree computed them), its other pages zeros until the transfer.
"""

from __future__ import annotations

import contextlib
import ctypes
import zlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from pdverify.model.checksum import ChecksumCase, ChecksumTrace
from pdverify.targets.sglang_prefill import _extend_range

PAGE_BYTES = 16
"""Bytes of one page item of each side's registered KV buffer."""
SIGNATURE = 0x5EED
"""The KV-layout signature both sides share (one model, one layout)."""
ROOM = 4242


class _Buffers:
    """The registered KV buffers of both engines: base address -> (tensor, item length)."""

    def __init__(self) -> None:
        self.by_base: dict[int, tuple[torch.Tensor, int]] = {}

    def register(self, kv: torch.Tensor) -> int:
        self.by_base[kv.data_ptr()] = (kv, kv.shape[1])
        return int(kv.data_ptr())

    def page(self, address: int, length: int) -> tuple[int, int]:
        """(base, page) that ``address`` names, refusing an address off every buffer's page grid."""
        for base, (kv, item) in self.by_base.items():
            if base <= address < base + kv.numel():
                offset = address - base
                assert offset % item == 0 and length == item, f"address {address} is off the page grid of {base}"
                assert offset + length <= kv.numel(), f"page at offset {offset} runs past the buffer"
                return base, offset // item
        raise AssertionError(f"address {address} is in no registered KV buffer")


def _engine(sglang: Any, buffers: _Buffers, pages: tuple[int, ...], ps: int, length: int, row: int) -> Any:
    """One engine's static paged pool: the allocator (page size), the request's row on ``pages``, its KV bytes."""
    allocator = sglang.PagedTokenToKVPoolAllocator.__new__(sglang.PagedTokenToKVPoolAllocator)
    allocator.page_size = ps
    allocator._kvcache = SimpleNamespace()  # a plain KV pool: no state buffers (state_indices_for_request: None)
    table = torch.zeros((row + 2, len(pages) * ps), dtype=torch.int32)
    table[row, : len(pages) * ps] = torch.tensor([p * ps + o for p in pages for o in range(ps)], dtype=torch.int32)
    kv = torch.zeros((max(pages) + 1, PAGE_BYTES), dtype=torch.uint8)
    base = buffers.register(kv)
    return SimpleNamespace(allocator=allocator, req_to_token_pool=SimpleNamespace(req_to_token=table), kv=kv,
                           base=base, row=row, reads=[])  # fmt: skip


def _computer(sglang: Any, engine: Any) -> Any:
    class OnDevice(torch.Tensor):  # compute() asserts the index tensors are on the GPU
        @property
        def is_cuda(self) -> bool:  # type: ignore[override, unused-ignore]
            return True

    class Computer(sglang.KvChecksumComputer):  # type: ignore[misc, name-defined, unused-ignore]
        def compute(self, kv_page_indices_gpu: Any, state_indices_gpu: Any = None) -> int:
            state = None if state_indices_gpu is None else state_indices_gpu.as_subclass(OnDevice)
            engine.reads.append(())
            return int(super().compute(kv_page_indices_gpu.as_subclass(OnDevice), state))

    return Computer(torch.device("cpu"), kv_data_ptrs=[engine.base], kv_item_lens=[PAGE_BYTES])


@contextlib.contextmanager
def _cpu_kernel(adler32: Any, buffers: _Buffers, engines: list[Any]) -> Iterator[None]:
    """SGLang's ``adler32_strided_checksum`` with its JIT module on CPU: the addresses SGLang computed are read as
    bytes, and each is traced back to the page of the engine whose buffer it is in."""

    class CpuKernel:
        def adler32_strided(self, ptrs: Any, lens: Any, states: Any, total: int) -> None:
            parts, pages = [], []
            for address, length in zip(ptrs.tolist(), lens.tolist(), strict=True):
                base, page = buffers.page(int(address), int(length))
                pages.append((base, page))
                parts.append(ctypes.string_at(int(address), int(length)))
            for engine in engines:
                if engine.reads and engine.reads[-1] == ():
                    engine.reads[-1] = tuple(p for b, p in pages if b == engine.base) or ("elsewhere",)
            states[0] = zlib.adler32(b"".join(parts))

        def adler32_reduce(self, states: Any, result: Any, n: int) -> None:
            result[0] = states[0]

    with mock.patch.object(adler32, "_jit_adler32_module", lambda: CpuKernel()):
        yield


def _modules() -> Any:  # pragma: no cover - conformance venv
    """The SGLang modules and classes the driver calls (imported at the first call: nothing of SGLang at import)."""
    from sglang.kernels.ops.memory import adler32
    from sglang.srt.disaggregation import decode, prefill
    from sglang.srt.disaggregation.checksum import KvChecksumComputer
    from sglang.srt.disaggregation.decode import (
        DecodePreallocQueue,
        DecodeRequest,
        DecodeTransferQueue,
        SchedulerDisaggregationDecodeMixin,
    )
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.sampling.sampling_params import SamplingParams

    return SimpleNamespace(
        adler32=adler32,
        decode=decode,
        prefill=prefill,
        KvChecksumComputer=KvChecksumComputer,
        DecodePreallocQueue=DecodePreallocQueue,
        DecodeRequest=DecodeRequest,
        DecodeTransferQueue=DecodeTransferQueue,
        SchedulerDisaggregationDecodeMixin=SchedulerDisaggregationDecodeMixin,
        SchedulerDisaggregationPrefillMixin=SchedulerDisaggregationPrefillMixin,
        Req=Req,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator,
        SamplingParams=SamplingParams,
    )


def _req(sglang: Any, rid: str, input_ids: list[int]) -> Any:
    return sglang.Req(rid, "", list(input_ids), sglang.SamplingParams(max_new_tokens=4096),
                      bootstrap_host="10.0.0.1", bootstrap_port=8998, bootstrap_room=ROOM)  # fmt: skip


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
    pre = _engine(sg, buffers, case.prefill_pages, ps, case.length, row=2)
    dec = _engine(sg, buffers, case.decode_pages, ps, case.length, row=1)
    for i, page in enumerate(case.prefill_pages):  # each page holds its logical page's KV
        pre.kv[page] = i % 251 + 1
    for i in range(d // ps):  # decode's tree holds the prefix: the same KV, computed there
        dec.kv[case.decode_pages[i]] = i % 251 + 1

    # decode: the request, and a retraction after its outputs (Scheduler.pause_generation, mode="retract")
    dreq = _req(sg, "r0", [1000 + i for i in range(case.prompt)])
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
    decode_req = sg.DecodeRequest(req=dreq, kv_receiver=SimpleNamespace(clear=lambda: None),
                                  is_rebootstrap=case.rebootstrap, metadata_buffer_index=0)  # fmt: skip
    slots = dec.req_to_token_pool.req_to_token[dec.row][d:fill]
    if hasattr(sg.DecodePreallocQueue, "_transfer_page_indices"):  # the queue itself is not read
        dst = sg.DecodePreallocQueue._transfer_page_indices(None, decode_req, slots, ps)
    else:
        dst = sg.decode.kv_to_page_indices(slots.numpy(), ps)
    destinations = tuple(int(p) for p in dst.tolist())

    # prefill: the request it receives (decode's rebootstrap payload, or the prompt), chunk by chunk
    ids = dreq.build_rebootstrap_payload()["input_ids"] if case.rebootstrap else list(dreq.origin_input_ids)
    preq = _req(sg, "r0", ids)
    preq.kv.req_pool_idx = pre.row
    preq.disagg_decode_prefix_len = preq.start_send_idx = d
    preq.metadata_buffer_index = 0
    sends: list[list[int]] = []
    preq.disagg_kv_sender = SimpleNamespace(
        supports_host_tensor_indices=False,
        get_max_transfer_tokens=lambda: None,
        should_send_kv_chunk=lambda num_pages, last_chunk: num_pages > 0 or last_chunk,
        send=lambda kv_indices, *a, **kw: sends.append([int(p) for p in kv_indices]),
    )
    metadata: dict[int, Any] = {}
    psched = _PrefillScheduler(sg, pre, metadata)
    dsched = _DecodeScheduler(sg, dec)
    engines = [pre, dec]
    ends = list(case.chunk_ends)
    with _single_rank(), _cpu_kernel(sg.adler32, buffers, engines):
        start = d
        for k, end in enumerate(ends):
            preq.extend_end, preq.extend_range = end, _extend_range(start, end)
            psched.send_kv_chunk(preq, last_chunk=k == len(ends) - 1)
            start = end
        sent = tuple(p for s in sends for p in s)
        if len(sent) != len(destinations):
            raise AssertionError(f"prefill sent {len(sent)} pages for {len(destinations)} destinations")
        for src, to in zip(sent, destinations, strict=True):  # the transfer: whole pages
            dec.kv[to] = pre.kv[src]

        _transfer_queue(sg, dsched, metadata)._commit_transfer_to_req(decode_req)
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
            dsched._verify_kv_checksums(batch)
    if len(pre.reads) != 1 or len(dec.reads) != 1:
        raise AssertionError(f"digests: prefill {len(pre.reads)}, decode {len(dec.reads)} (one each expected)")
    kept = len(batch.reqs) == 1 and not aborted
    return ChecksumTrace(_pages(pre.reads[0]), sent, destinations, _pages(dec.reads[0]), kept,
                         "; ".join(aborted))  # fmt: skip


def _pages(read: tuple[Any, ...]) -> tuple[int, ...]:
    """The pages a digest read of its own engine's buffer ("elsewhere": it read none there)."""
    if read and read[0] == "elsewhere":
        raise AssertionError("a digest read another engine's KV buffer")
    return tuple(int(p) for p in read)


class _PrefillScheduler:  # pragma: no cover - conformance venv
    """The prefill scheduler's state ``send_kv_chunk`` reads (the real ``Scheduler.__init__`` is skipped)."""

    def __new__(cls, sg: Any, engine: Any, metadata: dict[int, Any]) -> Any:
        sched = sg.SchedulerDisaggregationPrefillMixin.__new__(
            type("PrefillScheduler", (sg.SchedulerDisaggregationPrefillMixin,), {})
        )
        sched.token_to_kv_pool_allocator = engine.allocator
        sched.req_to_token_pool = engine.req_to_token_pool
        sched.kv_checksum_computer = _computer(sg, engine)
        sched.enable_staging = False
        sched.disagg_prefill_pending_chunk_rids = set()
        sched.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=SIGNATURE, kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=[]))
        )

        def set_kv_checksum(req: Any, digest: int, *signature: int) -> None:
            # 0.5.23 stores (digest, signature) and decode reads both back; 0.5.21-0.5.22 the digest alone
            metadata[req.metadata_buffer_index] = (digest, *signature) if signature else digest

        sched.disagg_metadata_buffers = SimpleNamespace(set_buf=lambda req: None, set_kv_checksum=set_kv_checksum)
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
        sched.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True), kv_checksum_signature=SIGNATURE
        )
        sched.attn_tp_cpu_group = None
        sched.tree_cache = None
        sched.output_streamer = SimpleNamespace(stream_output=lambda reqs, return_logprob: None)
        sched.metrics_reporter = SimpleNamespace(enable_metrics=False)
        sched.batch_result_processor = SimpleNamespace(_maybe_update_reasoning_tokens=lambda req, token: None)
        sched.spec_algorithm = SimpleNamespace(is_none=lambda: True)
        return sched


def _transfer_queue(sg: Any, dsched: Any, metadata: dict[int, Any]) -> Any:  # pragma: no cover
    """A ``DecodeTransferQueue`` holding what ``_commit_transfer_to_req`` reads; its metadata buffer hands over what
    prefill wrote (the digest, with its signature from 0.5.23), a handoff token and the room."""
    queue = sg.DecodeTransferQueue.__new__(sg.DecodeTransferQueue)
    queue.scheduler = dsched
    queue.spec_algorithm = dsched.spec_algorithm
    queue._skipped_checksum_signatures = set()
    queue.metadata_buffers = SimpleNamespace(
        get_kv_checksum=lambda idx: metadata[idx],
        get_buf=lambda idx: (
            torch.tensor([31337]),  # the handoff token prefill sampled
            torch.zeros(7, dtype=torch.int64),  # cached_tokens and the multimodal counts
            None, None, None, None, None, None, None, None, None, None, None,
            torch.tensor([ROOM]),
        ),
    )  # fmt: skip
    return queue
