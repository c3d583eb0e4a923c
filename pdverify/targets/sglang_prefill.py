"""The prefill exchange unit on the installed SGLang: its own scheduler methods and KV sender, driven on CPU.

Runs, unmodified, ``PrefillBootstrapQueue.finalize_bootstrap``, ``SchedulerDisaggregationPrefillMixin``'s
``maybe_send_cached_prefix_chunk``, ``send_kv_chunk`` and ``_send_kv_chunk`` (with ``compute_grid_segments``,
the state payload closures and SGLang's ``kv_to_page_indices`` / ``suffix_page_indices`` /
``minimax_index_transfer_pages``) and the real ``CommonKVSender`` (``__init__``, ``init``,
``pop_decode_prefix_len``, ``get_max_transfer_tokens``, ``should_send_kv_chunk``, ``_prepare_send_indices``,
``send``) with ``CommonKVManager.prepare_send_state_indices``. The objects around them are small stand-ins
built from a ``PrefillCase`` (sglang-real-paths.md sections 2-3): a scheduler subclass without ``__init__``, a
bootstrap queue subclass, a request, and a KV manager whose ``add_transfer_request`` records each transfer.

The globals the code reads are patched for the call only and restored after it, also on error:
``prefill.get_schedule`` (the staging grid's ``chunked_prefill_size``); ``get_parallel().num_dp_ranks`` is
overridden while the sender is built. The host-tensor path (a sender with ``supports_host_tensor_indices``, as
Mooncake's) needs CUDA for three calls: without CUDA, ``prefill.torch`` is ``TorchWithoutCuda`` for the call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import torch

from pdverify.model.exchange import PrefillCase, PrefillTrace, Transfer


def _as_list(values: Any) -> tuple[int, ...]:
    if isinstance(values, torch.Tensor):
        values = values.cpu().numpy()
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


def _dtype(values: Any) -> str:
    if isinstance(values, torch.Tensor):
        return str(values.dtype).removeprefix("torch.")
    return str(np.asarray(values).dtype)


class _Manager:
    """The KV manager the real ``CommonKVSender`` reads; ``add_transfer_request`` records."""

    def __init__(self, case: PrefillCase, room: int, prepare_state: Any) -> None:
        self.sender_trace_module = None
        self.deferred_bootstrap = None
        self.is_dummy_cp_rank = False
        self.attn_dp_rank = 0
        self.kv_shard_size = 1
        self.enable_all_cp_ranks_for_transfer = False
        self.req_to_decode_prefix_len = {room: case.decode_prefix}
        self._dcp_pack_max_tokens = case.dcp_max_tokens
        self.transfer_infos = {room: {"10.0.0.2:9000": SimpleNamespace(is_dummy=False)}}
        self.decode_kv_args_table = {"10.0.0.2:9000": SimpleNamespace(requires_dcp_relayout=True)}
        self.status: list[tuple[int, Any]] = []
        self.transfers: list[Transfer] = []
        self._prepare_state = prepare_state

    def update_status(self, room: int, status: Any) -> None:
        self.status.append((room, status))

    def prepare_send_state_indices(self, state: Any) -> Any:
        return self._prepare_state(self, state)

    def add_transfer_request(
        self, room: int, kv_indices: Any, index_slice: slice, is_last_chunk: bool, **kw: Any
    ) -> None:
        state = kw.get("state_indices")
        self.transfers.append(
            Transfer(
                pages=_as_list(kv_indices),
                dtype=_dtype(kv_indices),
                start=index_slice.start,
                stop=index_slice.stop,
                is_last=bool(is_last_chunk),
                aux_index=kw.get("aux_index"),
                state=None if state is None else tuple(_as_list(s) for s in state),
                num_kv_tokens=kw.get("num_kv_tokens"),
            )
        )


class _FakeEvent:
    """``torch.cuda.Event`` on a machine without CUDA: ``record`` does nothing."""

    def record(self, stream: Any = None) -> None:
        pass


class TorchWithoutCuda:
    """The ``torch`` name inside ``sglang.srt.disaggregation.prefill`` on a machine without CUDA.

    Forwards everything to torch except the three calls of the host-tensor path that need a CUDA driver:
    ``torch.empty(..., pin_memory=True)`` (the pin is dropped: pinning changes where a host tensor lives, not its
    values), ``torch.cuda.Event().record(...)`` and ``torch.cuda.current_stream()`` (no-ops: there is no stream to
    order). The formula under test, ``kv[::ps] // ps`` and the copy into the host tensor, runs unchanged.
    On a CUDA machine the driver does not install it: the path runs as shipped.
    """

    cuda = SimpleNamespace(Event=_FakeEvent, current_stream=lambda: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return torch.empty(*args, **kwargs)


@contextmanager
def _patched_schedule(prefill: Any, chunked_prefill_size: int | None) -> Iterator[None]:
    if chunked_prefill_size is None:
        yield
        return
    with mock.patch.object(prefill, "get_schedule", lambda: SimpleNamespace(chunked_prefill_size=chunked_prefill_size)):
        yield


def sglang_prefill_exchange(case: PrefillCase, device: str) -> PrefillTrace:  # pragma: no cover - conformance venv
    from sglang.srt.disaggregation import prefill
    from sglang.srt.disaggregation.base.conn import StateType
    from sglang.srt.disaggregation.common.conn import CommonKVManager, CommonKVSender
    from sglang.srt.runtime_context import get_parallel

    room = 4242
    manager = _Manager(case, room, CommonKVManager.prepare_send_state_indices)
    with get_parallel().override(num_dp_ranks=1):
        sender = CommonKVSender(manager, "10.0.0.1:8998", room)

    width = case.length + case.page_size
    table = torch.zeros((case.req_pool_idx + 1, width), dtype=torch.int32, device=device)
    table[case.req_pool_idx, : case.length] = torch.tensor(case.row, dtype=torch.int32, device=device)
    offset = case.translate_offset

    def translate(t: torch.Tensor) -> torch.Tensor:
        return t if offset is None else t.to(torch.int64) + offset

    kvcache = SimpleNamespace(request_window=None, unified_swa_ring_size=case.ring_size, unified_swa_window=case.window)
    allocator = SimpleNamespace(
        page_size=case.page_size,
        translate_kv_indices_for_transfer=translate,
        translate_swa_indices_for_transfer=lambda t: t,
        get_kvcache=lambda: kvcache,
    )
    set_buf: list[str] = []

    class Scheduler(prefill.SchedulerDisaggregationPrefillMixin):  # type: ignore[misc]
        pass

    sched: Any = Scheduler()
    sched.token_to_kv_pool_allocator = allocator
    sched.req_to_token_pool = SimpleNamespace(req_to_token=table)
    sched.enable_staging = case.chunked_prefill_size is not None
    sched.enable_overlap = False
    sched.kv_checksum_computer = None
    sched.disagg_metadata_buffers = SimpleNamespace(set_buf=lambda r: set_buf.append(r.rid))
    sched.disagg_prefill_bootstrap_queue = SimpleNamespace(
        kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=[StateType[k] for k in case.state_types]))
    )
    sched.disagg_prefill_pending_chunk_rids = set()
    sched.sliding_window_size = case.window

    class Queue(prefill.PrefillBootstrapQueue):  # type: ignore[misc]
        def __init__(self) -> None:
            self.scheduler = sched
            self.req_to_metadata_buffer_idx_allocator = SimpleNamespace(
                available_size=lambda: 1, alloc=lambda: case.aux_index
            )

    req: Any = SimpleNamespace(
        rid="r0",
        origin_input_ids=[0] * case.length,
        extend_end=0,
        kv=SimpleNamespace(req_pool_idx=case.req_pool_idx),
        disagg_kv_sender=sender,
        pending_bootstrap=True,
        metadata_buffer_index=-1,
        time_stats=SimpleNamespace(set_bootstrap_done_time=lambda: None),
        prefix_len=case.early_prefix or 0,
        host_hit_length=0,
        early_send_prefix_end=None,
        start_send_idx=0,
        disagg_decode_prefix_len=0,
    )
    if case.host_tensor_indices:
        sender.supports_host_tensor_indices = True
    shim = case.host_tensor_indices and not torch.cuda.is_available()
    with (
        _patched_schedule(prefill, case.chunked_prefill_size),
        mock.patch.object(prefill, "torch", TorchWithoutCuda()) if shim else contextlib.nullcontext(),
    ):
        assert Queue().finalize_bootstrap(req)
        trace = PrefillTrace(sender.num_kv_indices, manager.transfers, [req.start_send_idx])
        for k, end in enumerate(case.chunk_ends):
            req.extend_end = end
            if k == 0:
                if case.early_prefix is not None:
                    sched.maybe_send_cached_prefix_chunk(req)
                trace.start_send_idx.append(req.start_send_idx)
            sched.send_kv_chunk(req, last_chunk=k == len(case.chunk_ends) - 1)
            trace.start_send_idx.append(req.start_send_idx)
    trace.metadata_sets = len(set_buf)
    return trace
