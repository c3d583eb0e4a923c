"""F4: with the PD KV checksum on, prefill asserts on its first request for an MXFP8 or DeepSeek-V4 KV pool
(SGLang 0.5.23).

Standalone: imports only sglang, torch, numpy and the standard library. Runs on CPU.

With --disaggregation-enable-kv-checksum, both roles build ``KvChecksumComputer`` from ``kv_args.state_data_ptrs``
(prefill.py:247-253, decode.py:485-491), and ``KvChecksumComputer.compute`` asserts
``state_indices_gpu is not None`` whenever state buffers are registered (checksum.py:119-120). But
``state_indices_for_request`` (checksum.py:54-87) returns None for two pool classes that register state:
``MHATokenToKVPoolMXFP8`` (--kv-cache-dtype mxfp8: block scales as StateType.BLOCK_SCALE, utils.py:1513-1518) and
``DeepSeekV4TokenToKVPool`` (SWA + DSV4_REQUEST_STATE, utils.py:1542-1597).

Runs SGLang's own code, unmodified:
  * the pools' PD registration: ``get_kv_transfer_buf_infos`` and ``setup_state_kv_args`` (the same calls
    ``PrefillBootstrapQueue._init_kv_manager`` makes), which decide the computer's state buffers;
  * ``KvChecksumComputer.__init__`` / ``compute`` on those buffers;
  * prefill: ``SchedulerDisaggregationPrefillMixin.send_kv_chunk(last_chunk=True)`` (-> ``page_indices_for_request``,
    ``state_indices_for_request``, ``compute``; for MXFP8 also ``_send_kv_chunk`` with its BLOCK_SCALE payload);
  * decode: ``SchedulerDisaggregationDecodeMixin._verify_kv_checksums``.

Objects: the MXFP8 case uses SGLang's real ``MHATokenToKVPoolMXFP8`` (page size 128, the production interleaved
scale layout), ``PagedTokenToKVPoolAllocator`` and ``ReqToTokenPool``, all constructed on CPU. The DeepSeek-V4 case
uses SGLang's real ``DeepSeekV4TokenToKVPool`` (page size 256, layers [SWA-only, C4, C128] as in its interleave, the
smallest geometry it accepts: 448 + 64 nope/rope dims make its 584-byte FP8 token) and the
``SWATokenToKVPoolAllocator`` its KV configurator builds for it, constructed on CPU inside SGLang's own runtime
context for a dummy-model prefill server (``create_context`` / ``use_context``: the pool reads the server's
configuration).

Stubbed, because it cannot run on CPU or needs a live peer:
  * the CUDA Adler-32 kernel ``adler32_strided_checksum`` -> a CPU Adler-32 over the same (ptr, item_len, index)
    triples; ``compute()``'s ``is_cuda`` asserts see a CPU index tensor tagged as on-device;
  * the KV sender (records what ``_send_kv_chunk`` hands to ``send``) and the transfer (a byte copy of the sent pages
    to decode's destinations, in order); for DeepSeek-V4 ``_send_kv_chunk`` itself is recorded, not run (its SWA and
    request-state payloads need the row's SWA slots and request-state ring, which an allocation would set up and
    the checksum does not read), and only the KV pages are copied;
  * decode's TP all-reduce of mismatch flags (one rank), ``prepare_abort`` / ``release_kv_cache`` (recorded).

Exit 1 while the defect is present (a side raises in the checksum, or decode rejects a byte-exact transfer), 0 on a
fixed SGLang.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import traceback
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
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.common import kv_to_page_indices
from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPoolMXFP8, ReqToTokenPool
from sglang.srt import runtime_context as rc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.server_args import ServerArgs

# --------------------------------------------------------------------------- stubs for what needs CUDA / a peer

_REGISTERED: dict[int, int] = {}  # data_ptr -> nbytes of every buffer handed to a checksum computer
# the configuration a dummy-model prefill server publishes (the DeepSeek-V4 pool reads it while it is built)
_CONTEXT = rc.create_context(ServerArgs(model_path="dummy", device="cpu", disaggregation_mode="prefill"), role="scheduler")


def _cpu_adler32_strided_checksum(data_ptrs, strides, indices) -> int:
    """CPU stand-in for ``sglang.kernels.ops.memory.adler32.adler32_strided_checksum`` (a CUDA kernel):
    Adler-32 of the selected items, buffer by buffer, index by index."""
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


def _flat(nested) -> list[int]:
    return [int(x) for group in nested for x in group]


class RecordingChecksumComputer(KvChecksumComputer):
    """The real ``KvChecksumComputer`` (``__init__`` and ``compute``) over the buffers the pool registers for PD,
    with the CUDA kernel on CPU; records the index vectors ``compute`` was given."""

    def __init__(self, kv_args):
        for ptr, n in zip(kv_args.kv_data_ptrs, kv_args.kv_data_lens):
            _REGISTERED[int(ptr)] = int(n)
        for ptr, n in zip(_flat(kv_args.state_data_ptrs), _flat(kv_args.state_data_lens)):
            _REGISTERED[ptr] = n
        # exactly as PrefillBootstrapQueue.__init__ / DecodePreallocQueue.__init__ build it
        super().__init__(
            torch.device("cpu"),
            kv_data_ptrs=kv_args.kv_data_ptrs,
            kv_item_lens=kv_args.kv_item_lens,
            state_data_ptrs=kv_args.state_data_ptrs,
            state_item_lens=kv_args.state_item_lens,
        )
        self.calls: list[tuple[list[int], list[int] | None]] = []

    def compute(self, kv_page_indices_gpu, state_indices_gpu=None) -> int:
        self.calls.append(
            (kv_page_indices_gpu.tolist(), None if state_indices_gpu is None else state_indices_gpu.tolist())
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
        state = None if state_indices is None else [np.asarray(s).reshape(-1).tolist() for s in state_indices]
        self.sends.append(([int(p) for p in kv_indices], state))


def _fill(t: torch.Tensor, gen: torch.Generator) -> None:
    b = t.view(torch.uint8)
    b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8, generator=gen))


def _copy_items(src_ptrs, dst_ptrs, item_lens, src_idx, dst_idx) -> None:
    """The transfer: item src_idx[i] of each source buffer -> item dst_idx[i] of the peer's buffer."""
    for sp, dp, n in zip(src_ptrs, dst_ptrs, item_lens):
        for s, d in zip(src_idx, dst_idx):
            ctypes.memmove(int(dp) + int(d) * int(n), int(sp) + int(s) * int(n), int(n))


# --------------------------------------------------------------------------- one engine (prefill or decode)


class Engine:
    """One engine's pool, allocator, request row, PD registration and checksum computer."""

    def __init__(self, *, kind: str, row_pages: list[int], length: int, req_pool_idx: int, seed: int):
        self.kind, self.length, self.req_pool_idx = kind, length, req_pool_idx
        gen = torch.Generator().manual_seed(seed)
        if kind == "mxfp8":
            self.page_size = ps = 128
            num_pages = 8
            # --kv-cache-dtype mxfp8: the real pool, FP8 K/V plus UE8M0 block scales (interleaved at page size 128)
            self.pool = MHATokenToKVPoolMXFP8(
                size=num_pages * ps, page_size=ps, dtype=torch.float8_e4m3fn, head_num=8, head_dim=128,
                layer_num=2, device="cpu", enable_memory_saver=False, enable_alt_stream=False,
            )  # fmt: skip
            self.allocator = PagedTokenToKVPoolAllocator(
                num_pages * ps, page_size=ps, dtype=torch.float8_e4m3fn, device="cpu", kvcache=self.pool,
                need_sort=False,
            )  # fmt: skip
            for t in self.pool.k_buffer + self.pool.v_buffer + self.pool.k_scale_buffer + self.pool.v_scale_buffer:
                _fill(t, gen)
        else:
            self.page_size = ps = 256  # DeepSeek-V4 paged SWA mode requires page size 256
            with rc.use_context(_CONTEXT):
                self.pool = _deepseek_v4_pool(ps, num_pages=8)
                # kv_cache_configurator: a DeepSeek-V4 pool with paged SWA gets the hybrid SWA allocator
                self.allocator = SWATokenToKVPoolAllocator(
                    8 * ps, 4 * ps, page_size=ps, dtype=torch.float8_e4m3fn, device="cpu", kvcache=self.pool,
                    need_sort=False,
                )  # fmt: skip
        self.req_to_token_pool = ReqToTokenPool(
            size=4, max_context_len=len(row_pages) * ps, device="cpu", enable_memory_saver=False
        )
        self.req_to_token_pool.req_to_token[req_pool_idx] = torch.tensor(
            [p * ps + o for p in row_pages for o in range(ps)], dtype=torch.int32
        )
        # what PrefillBootstrapQueue._init_kv_manager / DecodePreallocQueue register for PD
        self.kv_args = SimpleNamespace()
        self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens, self.kv_args.kv_item_lens = get_kv_transfer_buf_infos(
            self.pool
        )
        setup_state_kv_args(self.kv_args, self.pool, None, req_to_token_pool=self.req_to_token_pool)
        if kind != "mxfp8":  # each side's bytes in every buffer it registered for PD
            for ptr, n in [*zip(self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens),
                           *zip(_flat(self.kv_args.state_data_ptrs), _flat(self.kv_args.state_data_lens))]:  # fmt: skip
                ctypes.memmove(int(ptr), torch.randint(0, 256, (int(n),), dtype=torch.uint8, generator=gen)
                               .numpy().tobytes(), int(n))  # fmt: skip
        self.computer = RecordingChecksumComputer(self.kv_args)

    @property
    def row(self) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[self.req_pool_idx, : self.length]


def _deepseek_v4_pool(ps: int, *, num_pages: int) -> DeepSeekV4TokenToKVPool:
    """SGLang's ``DeepSeekV4TokenToKVPool`` at page size ``ps``: layers [SWA-only, C4, C128] (its interleave), FP8 KV,
    FP32 compress-state rings, ``num_pages`` full pages and half as many SWA pages, two request slots."""
    return DeepSeekV4TokenToKVPool(
        max_num_reqs=2, swa_size=num_pages // 2 * ps, c4_size=num_pages * ps // 4, c128_size=num_pages * ps // 128,
        c4_state_pool_size=64, c128_state_pool_size=8, page_size=ps, swa_page_size=ps, sliding_window=128,
        dtype=torch.float8_e4m3fn, c4_state_dtype=torch.float32, c128_state_dtype=torch.float32,
        qk_nope_head_dim=448, qk_rope_head_dim=64, indexer_head_dim=128, layer_num=3, device="cpu",
        enable_memory_saver=False, compression_ratios=[0, 4, 128], kv_source_layers=[], full_size=num_pages * ps,
    )  # fmt: skip


# --------------------------------------------------------------------------- the two schedulers


class PrefillScheduler(SchedulerDisaggregationPrefillMixin):
    """The prefill scheduler's state that ``send_kv_chunk`` reads (the real ``Scheduler.__init__`` is skipped)."""

    def __init__(self, engine: Engine, run_transfer_path: bool):
        self.token_to_kv_pool_allocator = engine.allocator
        self.req_to_token_pool = engine.req_to_token_pool
        self.kv_checksum_computer = engine.computer
        self.enable_staging = False
        self.disagg_prefill_pending_chunk_rids = set()
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(
            kv_checksum_signature=0x5EED, kv_manager=SimpleNamespace(kv_args=engine.kv_args)
        )
        self.checksums: list[int] = []
        self.disagg_metadata_buffers = SimpleNamespace(
            set_buf=lambda req: None,
            set_kv_checksum=lambda req, digest, signature: self.checksums.append(digest),
        )
        self.recorded_sends: list[tuple[int, int]] = []
        if not run_transfer_path:
            # DeepSeek-V4: the transfer path's SWA / request-state payloads need an allocation; record the call.
            self._send_kv_chunk = lambda req, last_chunk=False, end_idx=None: self.recorded_sends.append(
                (req.start_send_idx, end_idx)
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


def _where(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {os.path.basename(frame.filename)}:{frame.lineno} `{frame.line}`"


def run_case(*, kind: str, length: int, prefill_pages: list[int], decode_pages: list[int]) -> dict:
    """One request: prefill's last ``send_kv_chunk`` (no decode prefix), a byte-exact transfer, decode's check."""
    p = Engine(kind=kind, row_pages=prefill_pages, length=length, req_pool_idx=2, seed=1)
    d = Engine(kind=kind, row_pages=decode_pages, length=length, req_pool_idx=1, seed=2)
    r = dict(
        kind=kind, page_size=p.page_size, length=length, state_types=[st.value for st in p.kv_args.state_types],
        num_state_buffers=len(_flat(p.kv_args.state_data_ptrs)), prefill_error=None, decode_error=None,
        aborted=[], kept=None, digested=None, sent=None, prefill_digest=None,
    )  # fmt: skip

    sender = RecordingSender()
    preq = SimpleNamespace(
        rid="r0", origin_input_ids=[0] * length, extend_end=length, kv=SimpleNamespace(req_pool_idx=p.req_pool_idx),
        disagg_kv_sender=sender, start_send_idx=0, disagg_decode_prefix_len=0, metadata_buffer_index=0,
    )  # fmt: skip
    psched = PrefillScheduler(p, run_transfer_path=(kind == "mxfp8"))
    with get_parallel().override(attn_dcp_size=1):
        try:
            psched.send_kv_chunk(preq, last_chunk=True)
        except AssertionError as e:
            r["prefill_error"] = _where(e)
    if p.computer.calls:
        r["digested"] = p.computer.calls[0]
    if psched.checksums:
        r["prefill_digest"] = psched.checksums[0]

    # The transfer, byte for byte: KV pages of [0, L) to decode's pages, each state list to decode's list (the
    # destinations pop_preallocated computes: KV pages and, for BLOCK_SCALE, _full_kv_pages_payload).
    dst_pages = kv_to_page_indices(d.row, d.page_size).tolist()
    if sender.sends:
        (sent_pages, sent_state), = sender.sends
        r["sent"] = (sent_pages, sent_state)
    else:
        sent_pages, sent_state = kv_to_page_indices(p.row, p.page_size).tolist(), None
    _copy_items(p.kv_args.kv_data_ptrs, d.kv_args.kv_data_ptrs, p.kv_args.kv_item_lens, sent_pages, dst_pages)
    if sent_state is not None:
        for i, st in enumerate(p.kv_args.state_types):
            assert st.value == "block_scale"
            _copy_items(
                p.kv_args.state_data_ptrs[i], d.kv_args.state_data_ptrs[i], p.kv_args.state_item_lens[i],
                sent_state[i], dst_pages,
            )  # fmt: skip

    dreq = SimpleNamespace(
        rid="r0", bootstrap_room=4242, bootstrap_host="10.0.0.1", bootstrap_port=8998,
        kv=SimpleNamespace(req_pool_idx=d.req_pool_idx, cache_protected_len=0), origin_input_ids=[0] * length,
        # prefill never set a digest when it crashed; any non-zero value arms decode's check
        expected_kv_checksum=r["prefill_digest"] or 1, return_logprob=False,
        output_ids=[0],  # the handoff token, as a real Req holds it after the first transfer
    )  # fmt: skip
    batch = SimpleNamespace(reqs=[dreq])
    batch.filter_batch = lambda keep_indices: setattr(batch, "reqs", [batch.reqs[i] for i in keep_indices])
    with (
        get_parallel().override(attn_dcp_size=1),
        mock.patch.object(decode, "all_reduce_flags", lambda flags, group, op: flags),
        mock.patch.object(decode, "is_in_ci", lambda: False),
        mock.patch.object(decode, "prepare_abort", lambda req, msg, **kw: r["aborted"].append(msg)),
        mock.patch.object(decode, "release_kv_cache", lambda *a, **kw: None),
    ):
        try:
            DecodeScheduler(d)._verify_kv_checksums(batch)
            r["kept"] = len(batch.reqs) == 1
        except AssertionError as e:
            r["decode_error"] = _where(e)
    r["decode_digested"] = d.computer.calls[0] if d.computer.calls else None
    return r


def mxfp8_case() -> dict:
    # --kv-cache-dtype mxfp8 at page size 128 (the production interleaved-scale layout); a 300-token prompt on
    # 3 pages (the last partial), no decode prefix.
    return run_case(kind="mxfp8", length=300, prefill_pages=[5, 2, 7], decode_pages=[3, 6, 1])


def deepseek_v4_case() -> dict:
    # DeepSeek-V4 (paged SWA, page size 256); a 600-token prompt on 3 pages, no decode prefix.
    return run_case(kind="dsv4", length=600, prefill_pages=[4, 1, 6], decode_pages=[2, 7, 3])


def _wrong(r: dict) -> bool:
    return bool(r["prefill_error"] or r["decode_error"] or r["aborted"] or not r["kept"])


def _describe(r: dict) -> str:
    head = (
        f"the pool registers {r['num_state_buffers']} state buffers (state types {r['state_types']}), so the "
        "checksum computer has state buffers; "
    )
    if r["prefill_error"]:
        side = (
            f"prefill's send_kv_chunk(last_chunk=True) raises {r['prefill_error']} before anything is sent "
            f"(state_indices_for_request gave compute(kv_pages={r['digested'][0]}, state_indices=None))"
            if r["digested"]
            else f"prefill's send_kv_chunk(last_chunk=True) raises {r['prefill_error']}"
        )
    else:
        kv, st = r["digested"]
        side = f"prefill digests KV pages {kv} and state indices {st}"
        if r["sent"] is not None:
            side += f" and sends KV pages {r['sent'][0]} with BLOCK_SCALE pages {r['sent'][1][0]}"
    if r["decode_error"]:
        dec = f"decode's _verify_kv_checksums raises {r['decode_error']} as well"
    elif r["aborted"]:
        dec = f"decode aborts the request ({r['aborted'][0]!r}) although the bytes arrived intact"
    else:
        kv, st = r["decode_digested"]
        dec = f"decode digests pages {kv} and state indices {st}, the digests agree and decode keeps the request"
    return head + side + "; " + dec


def main() -> int:
    logging.getLogger(decode.__name__).setLevel(logging.CRITICAL)
    mx, v4 = mxfp8_case(), deepseek_v4_case()
    present = _wrong(mx) or _wrong(v4)
    where = os.path.dirname(sglang.__file__)
    print(
        f"F4 {'REPRODUCED' if present else 'not reproduced'} on SGLang {sglang.__version__} ({where}): with "
        "--disaggregation-enable-kv-checksum on a pool that registers state buffers for PD, "
        + ("KvChecksumComputer.compute asserts that state indices are given, but state_indices_for_request "
           "returns None for MHATokenToKVPoolMXFP8 and DeepSeekV4TokenToKVPool, so prefill crashes on the last "
           "send of its first request (and decode would on its verification). " if present
           else "neither side raises in the checksum and a byte-exact transfer verifies. ")
        + f"MXFP8 (--kv-cache-dtype mxfp8, page size 128, a 300-token prompt on pages [5, 2, 7], decode's on "
        f"[3, 6, 1]): {_describe(mx)}. DeepSeek-V4 (page size 256, a 600-token prompt on pages [4, 1, 6], decode's "
        f"on [2, 7, 3]): {_describe(v4)}. Expected: both sides digest the request and a byte-exact transfer "
        "verifies; the scheduler never raises."
    )  # fmt: skip
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
