"""F3: the PD KV checksum rejects every PD-rebootstrapped request that recomputed a new page (SGLang 0.5.23).

Standalone: imports only sglang, torch, numpy and the standard library. Runs on CPU.

A decode-side retraction in PD mode (``/pause_generation`` with ``mode="retract"``, and every DeepSeek-V4 decode
retraction) "rebootstraps" the request: the original prefill recomputes the KV of prompt + already emitted outputs
and sends it again. With ``--disaggregation-enable-kv-checksum`` prefill digests the pages of everything it sent,
``[0, len(prompt) + len(outputs))``, while decode's verifier digests only ``[0, len(origin_input_ids))``. Once the
outputs fill a page of their own the two digests cover different pages and decode aborts the request.

Runs SGLang's own code, unmodified, for every step that decides a range or a digest:
  * decode, retraction: the three lines of ``Scheduler.pause_generation(mode="retract")`` for a decode worker
    (scheduler.py:5904-5906: pop the boundary token, ``pd_rebootstrap_in_progress = True``) are replayed as written;
  * decode, pre-allocation: ``DecodePreallocQueue._rebootstrap_prefill_len`` and ``_pre_alloc_fill_len`` (the
    length decode registers and asks prefill for), ``DecodePreallocQueue._transfer_page_indices`` (its destinations);
    ``cache_protected_len`` / ``decode_prefix_len`` are 0, as ``pop_preallocated`` sets them for a rebootstrap
    (decode.py:1498-1501 skip the radix match, decode.py:1636);
  * the rebootstrap request prefill receives: ``Req.build_rebootstrap_payload`` (its ``input_ids``), made into a real
    ``Req`` on the prefill side;
  * prefill: ``SchedulerDisaggregationPrefillMixin.send_kv_chunk(last_chunk=True)`` (-> ``page_indices_for_request``,
    ``state_indices_for_request``, ``KvChecksumComputer.compute``, ``_send_kv_chunk``);
  * decode, commit: ``DecodeTransferQueue._commit_transfer_to_req`` (re-arms ``expected_kv_checksum`` from the
    metadata buffer and replays the boundary token);
  * decode, admission: ``prepare_for_prebuilt`` clears ``pd_rebootstrap_in_progress`` (decode_schedule_batch_mixin.py:
    75-76) before ``get_new_prebuilt_batch`` verifies; that one assignment is replayed;
  * decode, verification: ``SchedulerDisaggregationDecodeMixin._verify_kv_checksums``.

Built around it (objects made with ``__new__``/``SimpleNamespace``, holding only what the code reads): a static paged
allocator, each side's request-to-token row, CPU bytes standing for the registered KV page buffer. Stubbed, because
it cannot run on CPU or needs a live peer:
  * the CUDA Adler-32 kernel ``adler32_strided_checksum`` -> a CPU Adler-32 over the same (ptr, item_len, index)
    triples, i.e. a deterministic digest of the pages the index vector names;
  * the KV sender (records what ``_send_kv_chunk`` sends) and the transfer (a byte copy of the sent pages to decode's
    destination pages, in order, as Mooncake does); the metadata buffer (hands decode prefill's digest and layout
    signature, and the room); decode's TP all-reduce of mismatch flags (one rank) and the abort plumbing.

Exit 1 while the defect is present (decode digests other pages than it received, or rejects a byte-exact
transfer), 0 on a fixed SGLang.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import sys
import zlib
from types import SimpleNamespace
from unittest import mock

import torch

import sglang
from sglang.srt.disaggregation import checksum, decode
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
from sglang.srt.runtime_context import get_parallel
from sglang.srt.sampling.sampling_params import SamplingParams

PAGE_BYTES = 48  # bytes of one KV page (all layers); small, any value works
SIGNATURE = 0x5EED  # the KV-layout signature both sides share (same model, TP, page size)
ROOM = 4242

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
    """The real ``KvChecksumComputer`` (its ``__init__`` and ``compute``) with the CUDA kernel on CPU; records the
    page list and the digest of every call."""

    def __init__(self, kv: torch.Tensor):
        _REGISTERED[kv.data_ptr()] = kv.numel() * kv.element_size()
        super().__init__(torch.device("cpu"), kv_data_ptrs=[kv.data_ptr()], kv_item_lens=[kv.shape[1]])
        self.calls: list[tuple[list[int], int]] = []

    def compute(self, kv_page_indices_gpu, state_indices_gpu=None) -> int:
        assert state_indices_gpu is None  # a static full-attention pool registers no state buffers
        with mock.patch.object(checksum, "adler32_strided_checksum", _cpu_adler32_strided_checksum):
            digest = super().compute(kv_page_indices_gpu.as_subclass(_OnDevice))
        self.calls.append((kv_page_indices_gpu.tolist(), digest))
        return digest


class RecordingSender:
    """The KV sender as ``_send_kv_chunk`` drives it (a real one needs a decode peer)."""

    supports_host_tensor_indices = False

    def __init__(self) -> None:
        self.sends: list[list[int]] = []

    def get_max_transfer_tokens(self):
        return None

    def should_send_kv_chunk(self, num_pages: int, last_chunk: bool) -> bool:
        return num_pages > 0 or last_chunk

    def send(self, kv_indices, state_indices=None, num_kv_tokens=None, indices_event=None):
        self.sends.append([int(p) for p in kv_indices])


# --------------------------------------------------------------------------- one engine's static paged KV pool


class Engine:
    """One engine's static paged pool: ``PagedTokenToKVPoolAllocator`` (page size only), the request's row on the
    given pages, and CPU bytes standing for the registered KV buffer (one item per page)."""

    def __init__(self, *, page_size: int, pages: list[int], req_pool_idx: int, seed: int):
        self.page_size, self.req_pool_idx = page_size, req_pool_idx
        self.allocator = PagedTokenToKVPoolAllocator.__new__(PagedTokenToKVPoolAllocator)
        self.allocator.page_size = page_size
        self.allocator._kvcache = SimpleNamespace()
        table = torch.zeros((req_pool_idx + 2, len(pages) * page_size), dtype=torch.int32)
        table[req_pool_idx] = torch.tensor(
            [p * page_size + o for p in pages for o in range(page_size)], dtype=torch.int32
        )
        self.req_to_token_pool = SimpleNamespace(req_to_token=table)
        gen = torch.Generator().manual_seed(seed)
        self.kv = torch.randint(0, 256, (max(pages) + 1, PAGE_BYTES), dtype=torch.uint8, generator=gen)
        self.computer = RecordingChecksumComputer(self.kv)


class PrefillScheduler(SchedulerDisaggregationPrefillMixin):
    """The prefill scheduler's state that ``send_kv_chunk`` reads (the real ``Scheduler.__init__`` is skipped)."""

    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=SIGNATURE,
            kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=[])),
        )
        self.metadata: dict[int, tuple[int, int]] = {}  # metadata_buffer_index -> (digest, signature)
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=lambda req: None,
            set_kv_checksum=lambda req, digest, signature: self.metadata.__setitem__(
                req.metadata_buffer_index, (digest, signature)
            ),
        )


class DecodeScheduler(SchedulerDisaggregationDecodeMixin):
    """The decode scheduler's state that ``_verify_kv_checksums`` reads."""

    def __init__(self, engine: Engine):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.disagg_decode_prealloc_queue = SimpleNamespace(
            kv_manager=SimpleNamespace(should_verify_kv_checksum=lambda addr: True),
            kv_checksum_signature=SIGNATURE,
        )
        self.attn_tp_cpu_group = None
        self.tree_cache = None
        self.output_streamer = SimpleNamespace(stream_output=lambda reqs, return_logprob: None)
        self.metrics_reporter = SimpleNamespace(enable_metrics=False)
        self.batch_result_processor = SimpleNamespace(_maybe_update_reasoning_tokens=lambda req, token: None)
        self.spec_algorithm = SimpleNamespace(is_none=lambda: True)


def _transfer_queue(dsched: DecodeScheduler, prefill_metadata: dict) -> DecodeTransferQueue:
    """A ``DecodeTransferQueue`` holding what ``_commit_transfer_to_req`` reads; its metadata buffer hands over what
    prefill wrote (digest, signature), the handoff token prefill sampled, and the room."""
    queue = DecodeTransferQueue.__new__(DecodeTransferQueue)
    queue.scheduler = dsched
    queue.spec_algorithm = dsched.spec_algorithm
    queue._skipped_checksum_signatures = set()
    queue.metadata_buffers = SimpleNamespace(
        get_kv_checksum=lambda idx: prefill_metadata[idx],
        get_buf=lambda idx: (
            torch.tensor([31337]),  # the handoff token prefill sampled
            torch.zeros(7, dtype=torch.int64),  # cached_tokens and the multimodal counts
            None, None, None, None, None, None, None, None, None, None, None,
            torch.tensor([ROOM]),
        ),
    )  # fmt: skip
    return queue


@contextlib.contextmanager
def _single_rank():
    with get_parallel().override(attn_dcp_size=1):
        yield


def _req(rid: str, input_ids: list[int], max_new_tokens: int) -> Req:
    return Req(
        rid, "", list(input_ids), SamplingParams(max_new_tokens=max_new_tokens),
        bootstrap_host="10.0.0.1", bootstrap_port=8998, bootstrap_room=ROOM,
    )  # fmt: skip


def run_case(*, page_size, prompt_len, emitted, prefill_pages, decode_pages, retract=True) -> dict:
    """One request on decode, (optionally) retracted by ``pause_generation(mode="retract")`` after emitting
    ``emitted`` tokens, recomputed by prefill, transferred byte for byte, committed and verified by decode."""
    p = Engine(page_size=page_size, pages=prefill_pages, req_pool_idx=2, seed=1)
    d = Engine(page_size=page_size, pages=decode_pages, req_pool_idx=1, seed=2)
    dsched = DecodeScheduler(d)

    # decode: the request, with the tokens it emitted before the pause
    dreq = _req("r0", [1000 + i for i in range(prompt_len)], 4096)
    dreq.output_ids.extend(2000 + i for i in range(emitted))
    if retract:
        # Scheduler.pause_generation(mode="retract"), decode worker (scheduler.py:5904-5906)
        if dreq.output_ids:
            dreq.pd_rebootstrap_forced_output_id = dreq.output_ids.pop()
        dreq.pd_rebootstrap_in_progress = True
    # decode: pop_preallocated registers the row and the destinations for [0, origin_input_len)
    origin_input_len = DecodePreallocQueue._rebootstrap_prefill_len(dreq)
    fill_len = DecodePreallocQueue._pre_alloc_fill_len(dreq)
    assert fill_len == origin_input_len <= len(decode_pages) * page_size
    dreq.kv.req_pool_idx = d.req_pool_idx
    dreq.kv.kv_committed_len = fill_len
    dreq.kv.cache_protected_len = decode_prefix_len = 0  # no radix match for a rebootstrap
    dst_pages = DecodePreallocQueue._transfer_page_indices(
        None, None, d.req_to_token_pool.req_to_token[d.req_pool_idx][decode_prefix_len:origin_input_len], page_size
    ).tolist()

    # prefill: the request it receives (the rebootstrap /generate payload, or the original prompt), last send
    if retract:
        payload = dreq.build_rebootstrap_payload()
        preq = _req(payload["rid"], payload["input_ids"], payload["sampling_params"]["max_new_tokens"])
    else:
        preq = _req("r0", dreq.origin_input_ids, 4096)
    preq.kv.req_pool_idx = p.req_pool_idx
    preq.extend_end = len(preq.origin_input_ids)
    preq.disagg_decode_prefix_len = decode_prefix_len
    preq.start_send_idx = 0
    preq.metadata_buffer_index = 0
    preq.disagg_kv_sender = sender = RecordingSender()
    psched = PrefillScheduler(p)
    with _single_rank():
        psched.send_kv_chunk(preq, last_chunk=True)
    sent_pages = [pg for send in sender.sends for pg in send]
    (prefill_digested, prefill_digest), = p.computer.calls

    # the transfer: source page i -> destination page i, byte for byte
    assert len(sent_pages) == len(dst_pages)
    d.kv[dst_pages] = p.kv[sent_pages]

    # decode: the transfer completes and is committed (re-arms expected_kv_checksum, replays the boundary token)
    decode_req = DecodeRequest(
        req=dreq, kv_receiver=SimpleNamespace(clear=lambda: None), is_rebootstrap=retract, metadata_buffer_index=0
    )
    _transfer_queue(dsched, psched.metadata)._commit_transfer_to_req(decode_req)
    expected = dreq.expected_kv_checksum
    # decode: the prebuilt batch; prepare_for_prebuilt clears the flag (decode_schedule_batch_mixin.py:75-76)
    dreq.pd_rebootstrap_in_progress = False

    aborted: list[str] = []
    batch = SimpleNamespace(reqs=[dreq])
    batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
    with (
        _single_rank(),
        mock.patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags),
        mock.patch.object(decode, "is_in_ci", lambda: False),
        mock.patch.object(decode, "prepare_abort", lambda req, msg, **kw: aborted.append(msg)),
        mock.patch.object(decode, "release_kv_cache", lambda *a, **kw: None),
    ):
        dsched._verify_kv_checksums(batch)
    (decode_digested, decode_digest), = d.computer.calls
    return dict(
        prompt_len=prompt_len, emitted=emitted, prefill_len=len(preq.origin_input_ids), registered=origin_input_len,
        prefill_digested=prefill_digested, sent_pages=sent_pages, prefill_digest=prefill_digest,
        expected=expected, decode_digested=decode_digested, dst_pages=dst_pages, decode_digest=decode_digest,
        aborted=aborted, kept=len(batch.reqs) == 1,
    )  # fmt: skip


def production_case(retract: bool = True) -> dict:
    # Page size 64, a 1000-token prompt (16 pages, the last one partial), 300 tokens generated before a
    # pause_generation(mode="retract") (e.g. around a weight update): prefill recomputes 1000 + 299 = 1299 tokens
    # (21 pages). Each engine holds the request on its own pages. Without the retraction (the control) it is the
    # ordinary first handoff of the same prompt: no outputs yet, 16 pages.
    rng = random.Random(3)
    return run_case(
        page_size=64, prompt_len=1000, emitted=300 if retract else 0, retract=retract,
        prefill_pages=rng.sample(range(1, 64), 21), decode_pages=rng.sample(range(1, 64), 21),
    )  # fmt: skip


def shrunk_case() -> dict:
    # Page size 1, a 1-token prompt, 2 tokens generated before the retraction: prefill recomputes 1 + 1 tokens.
    return run_case(page_size=1, prompt_len=1, emitted=2, prefill_pages=[1, 2], decode_pages=[1, 2])


def _wrong(r: dict) -> bool:
    return (
        r["prefill_digested"] != r["sent_pages"]
        or r["decode_digested"] != r["dst_pages"]
        or bool(r["aborted"])
        or not r["kept"]
    )


def _pages(pages: list[int]) -> str:
    return str(pages) if len(pages) <= 6 else f"{len(pages)} pages [{pages[0]}, {pages[1]}, ..., {pages[-1]}]"


def _describe(r: dict) -> str:
    verdict = (
        f"decode's digest {r['decode_digest']:#010x} != the {r['expected']:#010x} prefill wrote, so decode aborts "
        f"the request ({r['aborted'][0]!r}, HTTP 500; RuntimeError in CI) although its KV arrived byte for byte"
        if r["aborted"]
        else f"the digests agree ({r['decode_digest']:#010x}) and decode keeps the request"
    )
    return (
        f"decode registered and asked for {r['registered']} tokens and prefill recomputed {r['prefill_len']}; "
        f"prefill digested {_pages(r['prefill_digested'])} (= the pages it sent: "
        f"{r['prefill_digested'] == r['sent_pages']}); decode digested {_pages(r['decode_digested'])} while it "
        f"received {_pages(r['dst_pages'])}; {verdict}"
    )


def main() -> int:
    # decode logs each mismatch it aborts on; the paragraph below reports them
    logging.getLogger(decode.__name__).setLevel(logging.CRITICAL)
    prod, shrunk, control = production_case(), shrunk_case(), production_case(retract=False)
    present = _wrong(prod) or _wrong(shrunk)
    where = os.path.dirname(sglang.__file__)
    head = (
        f"F3 {'REPRODUCED' if present else 'not reproduced'} on SGLang {sglang.__version__} ({where}): with "
        "--disaggregation-enable-kv-checksum, a request that decode retracted (pause_generation mode=retract) is "
        "recomputed by prefill from prompt + outputs, "
    )
    head += (
        "and prefill digests all of it while decode's _verify_kv_checksums digests only [cache_protected_len, "
        "len(origin_input_ids)). "
        if present
        else "and both sides digest the same range of what was transferred. "
    )
    print(
        head
        + f"Production-shaped (page size 64, a 1000-token prompt, 300 tokens generated before the retraction): "
        f"{_describe(prod)}. Shrunk (page size 1, a 1-token prompt, 2 tokens generated): {_describe(shrunk)}. "
        f"Control (the production request's first handoff, no retraction): {_describe(control)}. "
        "Expected: decode digests the range it asked prefill to send, so a byte-exact transfer verifies."
    )
    if _wrong(control):
        print("unexpected: the control (no retraction) fails too; the harness, not F3, is at fault")
        return 2
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
