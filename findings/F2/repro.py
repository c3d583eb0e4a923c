"""F2: the PD KV checksum digests virtual page ids on a unified-memory pool (SGLang 0.5.23).

Standalone: imports only sglang, torch, numpy and the standard library. Runs on CPU.

Runs SGLang's own code, unmodified:
  * prefill: ``SchedulerDisaggregationPrefillMixin.send_kv_chunk`` (-> ``page_indices_for_request``,
    ``state_indices_for_request``, ``KvChecksumComputer.compute``, ``_send_kv_chunk`` with its Mamba payload);
  * decode: ``SchedulerDisaggregationDecodeMixin._verify_kv_checksums`` (the same digest helpers);
  * the unified pool's id translation: ``UnifiedMambaTokenToKVPoolAllocator.translate_kv_indices_for_transfer``
    (-> ``MultiEndedAllocator.translate_kv_loc`` -> ``translate_token_ids``, whose CPU path is SGLang's own) and
    ``UnifiedHybridReqToTokenPool.translate_mamba_indices`` (-> ``UnifiedMambaSlotAllocator.translate``);
  * decode's destination pages as ``pop_preallocated`` computes them (``translate_kv_indices_for_transfer``,
    ``DecodePreallocQueue._transfer_page_indices``).

Built around it (objects made with ``__new__``, their ``__init__`` skipped, holding only what the code reads):
the allocators' virtual->physical page tables, the request-to-token rows, CPU byte buffers standing for the
registered KV page envelopes and Mamba state entries. Stubbed, because it cannot run on CPU or needs a live peer:
  * the CUDA Adler-32 kernel ``adler32_strided_checksum`` -> a CPU Adler-32 over the same (ptr, item_len, index)
    triples (the reference upstream's test_kv_checksum.py uses); ``compute()``'s ``is_cuda`` asserts see a CPU
    index tensor tagged as on-device;
  * the KV sender (records what ``_send_kv_chunk`` hands to ``send``) and the transfer itself (a byte copy of the
    sent source pages/slots to decode's destination pages/slots, in order, as Mooncake does);
  * decode's TP all-reduce of mismatch flags (one rank), ``prepare_abort`` / ``release_kv_cache`` (recorded).

Exit 1 while the defect is present (a digest reads ids other than the ones the transfer addresses, or decode
rejects a byte-exact transfer), 0 on a fixed SGLang.
"""

from __future__ import annotations

import contextlib
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
from sglang.srt.disaggregation.base.conn import StateType
from sglang.srt.disaggregation.checksum import KvChecksumComputer
from sglang.srt.disaggregation.decode import (
    DecodePreallocQueue,
    SchedulerDisaggregationDecodeMixin,
)
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
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

PAGE_BYTES = 48  # bytes of one KV page envelope (all layers of one page); small, any value works
ENTRY_BYTES = 32  # bytes of one Mamba state entry


# --------------------------------------------------------------------------- stubs for what needs CUDA / a peer

_REGISTERED: dict[int, int] = {}  # data_ptr -> nbytes of every CPU buffer handed to a checksum computer


def _cpu_adler32_strided_checksum(data_ptrs, strides, indices) -> int:
    """CPU stand-in for ``sglang.kernels.ops.memory.adler32.adler32_strided_checksum`` (a CUDA kernel):
    Adler-32 of the selected items, tensor by tensor, index by index."""
    parts = []
    for base, stride, idx in zip(data_ptrs, strides, indices):
        for i in torch.Tensor.tolist(idx):
            assert 0 <= i and (i + 1) * stride <= _REGISTERED[base], f"index {i} outside the buffer"
            parts.append(ctypes.string_at(base + i * stride, stride))
    return zlib.adler32(b"".join(parts)) if parts else 1


class _OnDevice(torch.Tensor):
    """A CPU index tensor that passes ``KvChecksumComputer.compute``'s ``is_cuda`` asserts."""

    @property
    def is_cuda(self) -> bool:
        return True


class RecordingChecksumComputer(KvChecksumComputer):
    """The real ``KvChecksumComputer`` (its ``__init__`` and ``compute``) with the CUDA kernel on CPU; records
    the index vectors ``compute`` was given."""

    def __init__(self, kv: torch.Tensor, state: torch.Tensor):
        for t in (kv, state):
            _REGISTERED[t.data_ptr()] = t.numel() * t.element_size()
        super().__init__(
            torch.device("cpu"),
            kv_data_ptrs=[kv.data_ptr()],
            kv_item_lens=[kv.shape[1]],
            state_data_ptrs=[state.data_ptr()],
            state_item_lens=[state.shape[1]],
        )
        self.calls: list[tuple[list[int], list[int] | None]] = []

    def compute(self, kv_page_indices_gpu, state_indices_gpu=None) -> int:
        self.calls.append(
            (
                kv_page_indices_gpu.tolist(),
                None if state_indices_gpu is None else state_indices_gpu.tolist(),
            )
        )
        tag = lambda t: None if t is None else t.as_subclass(_OnDevice)  # noqa: E731
        with mock.patch.object(checksum, "adler32_strided_checksum", _cpu_adler32_strided_checksum):
            return super().compute(tag(kv_page_indices_gpu), tag(state_indices_gpu))


class RecordingSender:
    """The KV sender as ``_send_kv_chunk`` drives it (a real one needs a decode peer)."""

    supports_host_tensor_indices = False

    def __init__(self) -> None:
        self.sends: list[tuple[list[int], list | None]] = []

    def get_max_transfer_tokens(self):
        return None

    def should_send_kv_chunk(self, num_pages: int, last_chunk: bool) -> bool:
        return num_pages > 0 or last_chunk

    def send(self, kv_indices, state_indices=None, num_kv_tokens=None, indices_event=None):
        # one entry per registered state type (here MAMBA: a list holding the slot array)
        state = None if state_indices is None else [np.asarray(s).reshape(-1).tolist() for s in state_indices]
        self.sends.append(([int(p) for p in kv_indices], state))


# --------------------------------------------------------------------------- one engine's unified-memory pool


class Engine:
    """One engine's unified-memory hybrid-Mamba pool: ``UnifiedMambaTokenToKVPoolAllocator`` over a full-attention
    sub-pool with the given virtual->physical page table, ``UnifiedHybridReqToTokenPool`` with the Mamba slot
    table, the request's row of virtual token ids, and CPU bytes standing for the registered buffers."""

    def __init__(self, *, page_size, kv_v2p, mamba_v2p, req_pool_idx, virtual_pages, length, mamba_slot, seed):
        self.page_size, self.req_pool_idx, self.length = page_size, req_pool_idx, length
        full = MultiEndedAllocator.__new__(MultiEndedAllocator)
        full.virtual_to_physical = torch.tensor(kv_v2p, dtype=torch.int64)
        full.pool_page_size = page_size
        self.allocator = UnifiedMambaTokenToKVPoolAllocator.__new__(UnifiedMambaTokenToKVPoolAllocator)
        self.allocator.page_size = page_size
        self.allocator.full_attn_allocator = full
        self.allocator._kvcache = UnifiedHybridLinearKVPool.__new__(UnifiedHybridLinearKVPool)

        mamba = MultiEndedAllocator.__new__(MultiEndedAllocator)
        mamba.virtual_to_physical = torch.tensor(mamba_v2p, dtype=torch.int64)
        slots = UnifiedMambaSlotAllocator.__new__(UnifiedMambaSlotAllocator)
        slots._multi_ended_allocator = mamba
        self.req_to_token_pool = UnifiedHybridReqToTokenPool.__new__(UnifiedHybridReqToTokenPool)
        self.req_to_token_pool.mamba_allocator = slots
        width = len(virtual_pages) * page_size
        table = torch.zeros((req_pool_idx + 2, width), dtype=torch.int32)
        table[req_pool_idx] = torch.tensor(
            [p * page_size + o for p in virtual_pages for o in range(page_size)], dtype=torch.int32
        )
        self.req_to_token_pool.req_to_token = table
        mapping = torch.zeros(req_pool_idx + 2, dtype=torch.int32)
        mapping[req_pool_idx] = mamba_slot
        self.req_to_token_pool.req_index_to_mamba_index_mapping = mapping

        gen = torch.Generator().manual_seed(seed)
        # a physical page / slot for every id the tables name (an owner sub-pool has as many virtual ids as
        # physical pages)
        num_phys_pages = max(len(kv_v2p), max(kv_v2p) + 1)
        num_phys_slots = max(len(mamba_v2p), max(mamba_v2p) + 1)
        self.kv = torch.randint(0, 256, (num_phys_pages, PAGE_BYTES), dtype=torch.uint8, generator=gen)
        self.state = torch.randint(0, 256, (num_phys_slots, ENTRY_BYTES), dtype=torch.uint8, generator=gen)
        self.computer = RecordingChecksumComputer(self.kv, self.state)

    def destination(self, start: int):
        """What decode's ``pop_preallocated`` sends prefill as destinations: translated pages of [start, L) and
        the translated Mamba slot."""
        raw = self.req_to_token_pool.req_to_token[self.req_pool_idx][start : self.length]
        kv = self.allocator.translate_kv_indices_for_transfer(raw)
        pages = DecodePreallocQueue._transfer_page_indices(None, None, kv, self.page_size)
        slot = self.req_to_token_pool.translate_mamba_indices(
            self.req_to_token_pool.req_index_to_mamba_index_mapping[self.req_pool_idx]
        )
        return [int(p) for p in pages], [int(slot)]


class PrefillScheduler(SchedulerDisaggregationPrefillMixin):
    """The prefill scheduler's state that ``send_kv_chunk`` reads (the real ``Scheduler.__init__`` is skipped)."""

    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED,
            kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=[StateType.MAMBA])),
        )
        self.checksums: list[int] = []
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=lambda req: None,
            set_kv_checksum=lambda req, digest, signature: self.checksums.append(digest),
        )


class DecodeScheduler(SchedulerDisaggregationDecodeMixin):
    """The decode scheduler's state that ``_verify_kv_checksums`` reads."""

    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True)
        )
        self.attn_tp_cpu_group = None
        self.tree_cache = None
        self.output_streamer = SimpleNamespace(stream_output=lambda reqs, return_logprob: None)
        self.metrics_reporter = SimpleNamespace(enable_metrics=False)


@contextlib.contextmanager
def _single_rank():
    with get_parallel().override(attn_dcp_size=1):
        yield


def run_case(*, page_size, length, prefill_kw, decode_kw) -> dict:
    """One request through prefill's last ``send_kv_chunk``, a byte-exact transfer, and decode's verification."""
    p = Engine(page_size=page_size, length=length, seed=1, **prefill_kw)
    d = Engine(page_size=page_size, length=length, seed=2, **decode_kw)
    sender = RecordingSender()
    preq = SimpleNamespace(
        rid="r0", origin_input_ids=[0] * length, extend_end=length,
        kv=SimpleNamespace(req_pool_idx=p.req_pool_idx), disagg_kv_sender=sender,
        start_send_idx=0, disagg_decode_prefix_len=0, metadata_buffer_index=0,
    )  # fmt: skip
    psched = PrefillScheduler(p)
    with _single_rank():
        psched.send_kv_chunk(preq, last_chunk=True)
        dst_pages, dst_slot = d.destination(0)
    (sent_pages, sent_state), = sender.sends
    sent_slot = sent_state[0]
    digested_pages, digested_slot = p.computer.calls[0]

    # The transfer: source page/slot i -> destination page/slot i, byte for byte.
    d.kv[dst_pages] = p.kv[sent_pages]
    d.state[dst_slot] = p.state[sent_slot]

    aborted: list[str] = []
    dreq = SimpleNamespace(
        rid="r0", bootstrap_room=4242, bootstrap_host="10.0.0.1", bootstrap_port=8998,
        kv=SimpleNamespace(req_pool_idx=d.req_pool_idx, cache_protected_len=0),
        origin_input_ids=[0] * length, expected_kv_checksum=psched.checksums[0], return_logprob=False,
        output_ids=[0],  # the handoff token, as a real Req holds it after the first transfer
    )  # fmt: skip
    batch = SimpleNamespace(reqs=[dreq])
    batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
    dsched = DecodeScheduler(d)
    with (
        _single_rank(),
        mock.patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags),
        mock.patch.object(decode, "is_in_ci", lambda: False),
        mock.patch.object(decode, "prepare_abort", lambda req, msg, **kw: aborted.append(msg)),
        mock.patch.object(decode, "release_kv_cache", lambda *a, **kw: None),
    ):
        dsched._verify_kv_checksums(batch)
    decode_digested_pages, decode_digested_slot = d.computer.calls[0]
    return dict(
        digested_pages=digested_pages, digested_slot=digested_slot, sent_pages=sent_pages, sent_slot=sent_slot,
        decode_digested_pages=decode_digested_pages, decode_digested_slot=decode_digested_slot,
        dst_pages=dst_pages, dst_slot=dst_slot, prefill_digest=psched.checksums[0],
        decode_digest=_cpu_adler32_strided_checksum(
            [d.kv.data_ptr(), d.state.data_ptr()], [PAGE_BYTES, ENTRY_BYTES],
            [torch.tensor(decode_digested_pages), torch.tensor(decode_digested_slot)],
        ),
        aborted=aborted, kept=len(batch.reqs) == 1,
    )  # fmt: skip


def _v2p(pairs: dict[int, int], num_pages: int) -> list[int]:
    """A full sub-pool's page table: page 0 the padding anchor, unmapped pages -1, the trailing -1 sentinel."""
    table = [-1] * (num_pages + 1)
    table[0] = 0
    for v, phys in pairs.items():
        table[v] = phys
    return table


def production_case() -> dict:
    # Page size 64, a 300-token prompt (5 pages, the last one partial), no decode prefix. Both engines run a
    # hybrid-Mamba model on the unified pool; each has its own virtual ids and its own physical placement.
    return run_case(
        page_size=64,
        length=300,
        prefill_kw=dict(
            kv_v2p=_v2p({7: 13, 3: 4, 12: 1, 5: 10, 9: 6}, 16), mamba_v2p=_v2p({3: 6}, 8),
            req_pool_idx=2, virtual_pages=[7, 3, 12, 5, 9], mamba_slot=3,
        ),
        decode_kw=dict(
            kv_v2p=_v2p({2: 9, 8: 3, 4: 14, 11: 7, 6: 2}, 16), mamba_v2p=_v2p({5: 1}, 8),
            req_pool_idx=1, virtual_pages=[2, 8, 4, 11, 6], mamba_slot=5,
        ),
    )  # fmt: skip


def shrunk_case() -> dict:
    # pdverify S16's shrunk counterexample: page size 1, L = 1, row [1], v2p (0, 2); decode's row [1] maps to
    # physical page 1; the Mamba slot (1) is identity-mapped on both sides.
    return run_case(
        page_size=1,
        length=1,
        prefill_kw=dict(kv_v2p=[0, 2], mamba_v2p=[0, 1], req_pool_idx=0, virtual_pages=[1], mamba_slot=1),
        decode_kw=dict(kv_v2p=[0, 1], mamba_v2p=[0, 1], req_pool_idx=0, virtual_pages=[1], mamba_slot=1),
    )


def _wrong(r: dict) -> bool:
    return (
        r["digested_pages"] != r["sent_pages"]
        or r["digested_slot"] != r["sent_slot"]
        or r["decode_digested_pages"] != r["dst_pages"]
        or r["decode_digested_slot"] != r["dst_slot"]
        or bool(r["aborted"])
        or not r["kept"]
    )


def _describe(r: dict) -> str:
    verdict = (
        f"decode's digest {r['decode_digest']:#010x} != prefill's {r['prefill_digest']:#010x}, so decode aborts "
        f"the request ({r['aborted'][0]!r}) although its KV arrived byte for byte"
        if r["aborted"]
        else f"the digests agree ({r['prefill_digest']:#010x}) and decode keeps the request"
    )
    return (
        f"prefill's digest reads KV pages {r['digested_pages']} and Mamba slot {r['digested_slot']} while the "
        f"transfer sends pages {r['sent_pages']} and slot {r['sent_slot']}; decode's digest reads pages "
        f"{r['decode_digested_pages']} and slot {r['decode_digested_slot']} while its destinations are pages "
        f"{r['dst_pages']} and slot {r['dst_slot']}; {verdict}"
    )


def main() -> int:
    # decode logs each mismatch it aborts on; the paragraph below reports them
    logging.getLogger(decode.__name__).setLevel(logging.CRITICAL)
    prod, shrunk = production_case(), shrunk_case()
    present = _wrong(prod) or _wrong(shrunk)
    where = os.path.dirname(sglang.__file__)
    head = (
        f"F2 {'REPRODUCED' if present else 'not reproduced'} on SGLang {sglang.__version__} ({where}): with "
        "--disaggregation-enable-kv-checksum on a unified-memory hybrid-Mamba pool "
        "(UnifiedMambaTokenToKVPoolAllocator), "
    )
    head += (
        "send_kv_chunk digests the request's virtual ids while the transfer, and the registered buffers the "
        "checksum kernel reads, address physical ids. "
        if present
        else "both sides digest exactly the pages and Mamba slot the transfer addresses. "
    )
    print(
        head
        + "Production-shaped (page size 64, a 300-token prompt on 5 pages, no decode prefix; prefill's row on "
        f"virtual pages [7, 3, 12, 5, 9], Mamba slot 3; decode's on [2, 8, 4, 11, 6], slot 5): {_describe(prod)}. "
        f"Shrunk (page size 1, L=1, row [1], v2p (0, 2)): {_describe(shrunk)}. "
        "Expected: each side digests exactly the page and slot ids its transfer addresses (translated ids), so a "
        "byte-exact transfer verifies."
    )
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
