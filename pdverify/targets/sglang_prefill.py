"""The prefill exchange unit on the installed SGLang: its own scheduler methods and KV sender, driven on CPU.

Runs, unmodified, ``PrefillBootstrapQueue.pop_bootstrapped`` (the poll of the sender, a failed request dropped,
``finalize_bootstrap``; the poll's all-reduce over one rank is the identity), ``SchedulerDisaggregationPrefillMixin``'s
``maybe_send_cached_prefix_chunk``, ``send_kv_chunk`` and ``_send_kv_chunk`` (with ``compute_grid_segments``,
the state payload closures and SGLang's ``kv_to_page_indices`` / ``suffix_page_indices`` /
``minimax_index_transfer_pages``), the virtual-to-physical translation through SGLang's own page-table lookup
(``translate_token_ids``, the CPU path of the unified pools' ``translate_kv_loc``) and the real
``CommonKVSender`` (``__init__``, ``init``, ``pop_decode_prefix_len``, ``get_max_transfer_tokens``,
``should_send_kv_chunk``, ``_prepare_send_indices``, ``send``) with ``CommonKVManager.prepare_send_state_indices``.
The request is SGLang's own ``Req`` (``sglang_request.release_request``). The objects around them are small
stand-ins built from a ``PrefillCase``: a scheduler subclass without ``__init__``, a bootstrap queue subclass, and a
KV manager whose ``add_transfer_request`` records each transfer (its decode peers registered through SGLang's own
``requires_dcp_relayout`` and ``_init_dcp_pack_buffers_once``).

The server's configuration: from 0.5.22 the exchange runs under SGLang's own runtime context for a prefill scheduler
(``sglang_context.published``: the case's ``chunked_prefill_size`` and request tracing set through the bags'
``override``); before, ``prefill.get_schedule`` and ``conn.get_observability`` are patched for the call only and
restored after it, also on error. ``get_parallel().num_dp_ranks`` is overridden (its own ``override``) while the
sender is built. The host-tensor path (a sender with ``supports_host_tensor_indices``, as
Mooncake's) needs CUDA for three calls: without CUDA, ``prefill.torch`` is ``TorchWithoutCuda`` for the call.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import numpy as np
import torch

from pdverify.model.exchange import PrefillCase, PrefillTrace, Transfer
from pdverify.model.sender import BootstrapCase, BootstrapTrace, SenderCase, SenderTrace
from pdverify.production.transfer import KvChunk, PrefillSendState
from pdverify.targets.sglang_context import builds_server_args, context, published, server_args
from pdverify.targets.sglang_group import one_rank_gloo
from pdverify.targets.sglang_request import release_request


def int_tuple(values: Any) -> tuple[int, ...]:
    """A host or device tensor, array or list of ids as a tuple of Python ints."""
    if isinstance(values, torch.Tensor):
        values = values.cpu().numpy()
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


def _dtype(values: Any) -> str:
    if isinstance(values, torch.Tensor):
        return str(values.dtype).removeprefix("torch.")
    return str(np.asarray(values).dtype)


class _Manager:
    """The KV manager the real ``CommonKVSender`` reads; ``add_transfer_request`` records."""

    def __init__(self, case: PrefillCase | None, room: int, prepare_state: Any) -> None:
        self.sender_trace_module = None
        self.enable_trace = False  # what Mooncake's sender reads for the same switch (0.5.21, 0.5.22)
        self.deferred_bootstrap = None
        self.is_dummy_cp_rank = False
        self.attn_dp_rank = 0
        self.kv_shard_size, self.kv_shard_rank = 1, 0
        self.kv_args: Any = SimpleNamespace(state_types=[])  # what Mooncake's sender reads of the registered args
        self.enable_all_cp_ranks_for_transfer = False
        self.attn_cp_rank, self.attn_cp_size = 0, 1
        if case is not None and case.rank_split is not None:
            mode, rank, size = case.rank_split
            if mode == "kv_shard":  # KV cache sharding turns all-CP-ranks transfer on too (CommonKVManager)
                self.kv_shard_size, self.kv_shard_rank = size, rank
                self.enable_all_cp_ranks_for_transfer = True
            elif mode == "cp_all":
                self.enable_all_cp_ranks_for_transfer = True
                self.attn_cp_rank, self.attn_cp_size = rank, size
            else:
                self.attn_cp_rank, self.attn_cp_size = rank, size
                self.is_dummy_cp_rank = rank != 0
        self.req_to_decode_prefix_len = {room: case.decode_prefix if case else 0}
        peers = {"10.0.0.2:9000": SimpleNamespace(is_dummy=False)}
        if case is not None and case.dummy_peer:  # a dummy rank of decode's, listed before the real one
            peers = {"10.0.0.3:9000": SimpleNamespace(is_dummy=True), **peers}
        self.transfer_infos = {room: peers}
        _register_decode_peers(self, case, list(peers))
        self.status: list[tuple[int, Any]] = []
        from sglang.srt.disaggregation.base.conn import KVPoll

        self.request_status: dict[int, Any] = {room: KVPoll.Bootstrapping}
        self.get_session_id = lambda: "pdverify-session"  # read by Mooncake's sender in 0.4.6.post5-0.4.7
        # what a sender still bootstrapping compares its wait with (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT's default)
        self.bootstrap_timeout = 300
        self.defer_decode_allocation = False
        self.failures: list[tuple[int, str]] = []
        self.transfers: list[Transfer] = []
        self.raw: list[tuple[Any, slice, bool]] = []
        """Each transfer's page list as the sender passed it (array or tensor), its slice and last flag."""
        self._prepare_state = prepare_state
        # to 0.5.16 the sender and the all-CP-ranks filter read these leaves from the manager's own server arguments
        # (0.5.17 on: the runtime context's parallel namespace, ``_parallel_override``)
        self.server_args = SimpleNamespace(enable_dsa_cache_layer_split=False, dp_size=1, load_balance_method="auto")

    def update_status(self, room: int, status: Any) -> None:
        self.status.append((room, status))
        self.request_status[room] = status

    def check_status(self, room: int) -> Any:
        """The room's status as the sender polls it: decode's destinations have arrived (``WaitingForInput``)
        unless something failed the room."""
        return self.request_status[room]

    def record_failure(self, room: int, reason: str) -> None:
        self.failures.append((room, reason))

    def prepare_send_state_indices(self, state: Any) -> Any:
        return self._prepare_state(self, state)

    def add_transfer_request(
        self, room: int, kv_indices: Any, index_slice: slice, is_last_chunk: bool, *nixl: Any, **kw: Any
    ) -> list[Any]:
        """Records the transfer; returns its (no) transfer handles, which NIXL's sender keeps."""
        if nixl:  # NIXL's manager takes (chunk_id, aux_index, state_indices) positionally on every send, and
            # transfers aux and state with the last chunk only (nixl/conn.py, 0.5.11: "Only the last chunk we need to
            # send the aux data"): recorded as it transfers them
            _, aux, *state_lists = nixl
            state_list = state_lists[0] if state_lists else None
            kw = {
                "aux_index": aux if is_last_chunk else None,
                "state_indices": state_list if is_last_chunk else None,
                **kw,
            }
        state = kw.get("state_indices")
        if isinstance(state, (np.ndarray, torch.Tensor)):  # one payload, the pool type's (0.5.3.post3-0.5.11)
            state = [state]
        self.raw.append((kv_indices, index_slice, bool(is_last_chunk)))
        ranged = isinstance(index_slice, slice)  # a KV-sharded rank passes its owned positions instead
        self.transfers.append(
            Transfer(
                pages=int_tuple(kv_indices),
                dtype=_dtype(kv_indices),
                start=index_slice.start if ranged else 0,
                stop=index_slice.stop if ranged else 0,
                positions=None if ranged else int_tuple(index_slice),
                is_last=bool(is_last_chunk),
                aux_index=kw.get("aux_index"),
                state=None if state is None else tuple(int_tuple(s) for s in state),
                num_kv_tokens=kw.get("num_kv_tokens"),
                waits_on_forward=kw.get("wait_event") is not None,
            )
        )
        return []


class _FakeEvent:
    """``torch.cuda.Event`` on a machine without CUDA: ``record`` does nothing."""

    def record(self, stream: Any = None) -> None:
        pass


class TorchWithoutCuda:
    """The ``torch`` name inside ``sglang.srt.disaggregation.prefill`` on a machine without CUDA.

    Forwards everything to torch except the calls that need a CUDA driver, of the host-tensor path and of the
    overlap scheduler's early send (which records the forward's completion event):
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
    if chunked_prefill_size is None or not hasattr(prefill, "get_schedule"):  # 0.5.17: the send reads no grid
        yield
        return
    with mock.patch.object(prefill, "get_schedule", lambda: SimpleNamespace(chunked_prefill_size=chunked_prefill_size)):
        yield


def _duck_scheduler(  # pragma: no cover - conformance venv
    prefill: Any,
    table: torch.Tensor,
    page_size: int,
    *,
    translate: Any,
    staging: bool,
    state_types: list[Any],
    window: int,
    ring_size: int,
    set_buf: list[str],
    translate_swa: Any = None,
) -> Any:
    """A prefill scheduler without ``__init__`` holding what ``_send_kv_chunk`` reads (sglang-real-paths 2.1).
    ``translate_swa``: the full-to-SWA translation of the request's own SWA pool (``_swa_translation``); None: no SWA
    pool of its own, the identity."""
    kvcache = SimpleNamespace(request_window=None, unified_swa_ring_size=ring_size, unified_swa_window=window)
    to_swa = translate_swa if translate_swa is not None else (lambda t: t)
    allocator = SimpleNamespace(
        page_size=page_size,
        translate_kv_indices_for_transfer=translate,
        # the full-to-SWA translation (translate_loc_from_full_to_swa before 0.5.20)
        translate_swa_indices_for_transfer=to_swa,
        translate_loc_from_full_to_swa=to_swa,
        get_kvcache=lambda: kvcache,
    )

    class Scheduler(prefill.SchedulerDisaggregationPrefillMixin):  # type: ignore[misc]
        pass

    sched: Any = Scheduler()
    sched.token_to_kv_pool_allocator = allocator
    sched.req_to_token_pool = SimpleNamespace(req_to_token=table)
    sched.enable_staging = staging
    sched.enable_overlap = False
    sched.kv_checksum_computer = None
    sched.disagg_metadata_buffers = SimpleNamespace(set_buf=lambda r: set_buf.append(r.rid))
    sched.disagg_prefill_bootstrap_queue = SimpleNamespace(
        kv_manager=SimpleNamespace(kv_args=SimpleNamespace(state_types=state_types)),
        # to 0.4.6.post4 the last chunk's output token goes to the metadata buffer through the bootstrap queue (counted
        # as the metadata set, as later releases' set_buf)
        store_prefill_results=lambda index, token: set_buf.append("token"),
    )
    sched.disagg_prefill_pending_queue = sched.disagg_prefill_bootstrap_queue  # its name to 0.4.5.post3
    sched.disagg_prefill_pending_chunk_rids = set()
    sched.sliding_window_size = window
    return sched


OTHER_DECODE = "10.0.0.4:9000"
"""A decode instance that is not the room's peer, whose relayout gave the manager its DCP pack buffer."""


def _register_decode_peers(manager: Any, case: PrefillCase | None, peers: list[str]) -> None:  # pragma: no cover
    """Decode's registrations as prefill's bootstrap thread takes them (``start_prefill_thread``, 0.5.21 on): each
    peer's ``requires_dcp_relayout`` is SGLang's own ``CommonKVManager.requires_dcp_relayout`` over a prefill of DCP
    size 1 serving an MLA model, given the peer's DCP size (2 where it relayouts, prefill's 1 where not), and a
    relayouting peer's registration runs SGLang's own ``_init_dcp_pack_buffers_once``, which sizes the pack limit:
    the prefill buffer ceiling (``max_prefill_buffer_tokens()``, else ``max_prefill_tokens``) rounded up to a page.
    With ``dcp_relayout`` off the room's peers have prefill's DCP size and another decode instance (``OTHER_DECODE``)
    registers the relayout. The pack buffers themselves (device staging memory, registered with the transport)
    stand in: ``init_dcp_pack_buffers`` returns a marker. Releases before the DCP pack limit read none of this: their
    peers register as not relayouting and the manager has no limit."""
    try:
        conn: Any = importlib.import_module("sglang.srt.disaggregation.common.conn")
    except ImportError:  # 0.4.6.post5-0.4.7 have no common/conn.py
        conn = None
    manager._dcp_pack_max_tokens = manager._dcp_pack_buffers = None
    relayout = getattr(getattr(conn, "CommonKVManager", None), "requires_dcp_relayout", None)
    if relayout is None or case is None or case.dcp_max_tokens is None:
        manager.decode_kv_args_table = {peer: SimpleNamespace(requires_dcp_relayout=False) for peer in peers}
        return
    from sglang.srt.disaggregation.common import dcp_pack

    manager.dcp_size, manager.dcp_rank = 1, 0
    manager.is_mla_backend, manager.is_hybrid_mla_backend = True, False
    manager.transfer_queues = [None]
    manager._register_staging_memory = lambda ptr, size: None
    kv_args = manager.kv_args
    kv_args.kv_item_lens, kv_args.page_size, kv_args.num_draft_entries = [case.page_size * 64], case.page_size, 0
    registered = {peer: 2 if case.dcp_relayout else 1 for peer in peers}
    if not case.dcp_relayout:
        registered[OTHER_DECODE] = 2
    ceiling = case.dcp_max_tokens
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(dcp_pack, "init_dcp_pack_buffers", lambda *a, **kw: "pack buffers"))
        if context("prefill") is None:  # 0.5.21 publishes no runtime context
            stack.enter_context(mock.patch.object(conn, "max_prefill_buffer_tokens", lambda: 0))
            schedule = SimpleNamespace(max_prefill_tokens=ceiling)
            stack.enter_context(mock.patch.object(conn, "get_schedule", lambda: schedule))
        manager.decode_kv_args_table = {}
        for peer, dcp_size in registered.items():
            info = SimpleNamespace(dst_dcp_size=dcp_size, dst_dcp_rank=0)
            info.requires_dcp_relayout = relayout(manager, info.dst_dcp_size, info.dst_dcp_rank)
            if info.requires_dcp_relayout:
                conn.CommonKVManager._init_dcp_pack_buffers_once(manager, info.dst_dcp_size, include_draft=True)
            manager.decode_kv_args_table[peer] = info


def dcp_schedule(ceiling: int, page_size: int) -> dict[str, int]:
    """The schedule leaves that make ``ceiling`` the prefill buffer ceiling: ``chunked_prefill_size`` where it is a
    page multiple (prefill requires one), else chunked prefill off and ``max_prefill_tokens``."""
    if ceiling % page_size == 0:
        return {"chunked_prefill_size": ceiling}
    return {"chunked_prefill_size": -1, "max_prefill_tokens": ceiling}


def _common_manager() -> Any:  # pragma: no cover - conformance venv
    """``CommonKVManager``, or None where the release has none (0.4.8 and earlier: Mooncake's manager stands alone)."""
    try:
        from sglang.srt.disaggregation.common.conn import CommonKVManager
    except ImportError:
        return None
    return CommonKVManager


def _prepare_state(manager_class: Any) -> Any:
    """``CommonKVManager.prepare_send_state_indices`` (0.5.23), through which the sender passes the state lists; the
    releases before it pass them to the transfer as they are (their senders never call the manager's hook)."""
    return getattr(manager_class, "prepare_send_state_indices", None)


def _common_sender(
    manager: Any,
    room: int,
    case: PrefillCase | None = None,
    *,
    nixl: bool = False,
    bootstrap: str = "10.0.0.1:8998",
) -> Any:  # pragma: no cover - conformance venv
    """The release's KV sender: ``CommonKVSender`` (0.5.23; Mooncake's for a host-tensor case, the backend whose
    sender takes host tensors), or Mooncake's where the common one is absent, abstract or its ``send`` a placeholder
    (to 0.5.22), or NIXL's (``nixl``: the backend a 0.5.11 server requires for decode-side prefixes). Built under the
    case's attention DP width and balance method (one DP rank without a case), published where the release's sender
    reads them (``_dp_width``); with TP and PP ranks where the constructor takes them (0.4.8-0.5.21), at the
    ``bootstrap`` address."""
    common: Any = None
    with contextlib.suppress(ImportError):  # 0.4.8 has no CommonKVSender, 0.4.6.post5-0.4.7 no common/conn.py
        from sglang.srt.disaggregation.common import conn as common_conn

        common = getattr(common_conn, "CommonKVSender", None)
    sender_class: Any = common
    if nixl:
        from sglang.srt.disaggregation.nixl.conn import NixlKVSender

        sender_class = NixlKVSender
    elif (
        common is None
        or getattr(common, "__abstractmethods__", None)
        or "pp_rank" in inspect.signature(common).parameters
        or (case is not None and case.host_tensor_indices)  # the backend whose sender takes host tensors
    ):
        from sglang.srt.disaggregation.mooncake.conn import MooncakeKVSender

        sender_class = MooncakeKVSender
    ranks: tuple[Any, ...] = ([0], 0) if "pp_rank" in inspect.signature(sender_class).parameters else ()  # TP, PP
    dp = case.attention_dp if case is not None else None
    width, balance = 1, "round_robin"
    placed: tuple[bool, ...] = ()  # the router placed the request on a DP rank (the sender told so from 0.5.16)
    if dp is not None:
        width, _, method, placement = dp
        balance = "follow_bootstrap_room" if method == "follow_room" else "round_robin"
        if "req_has_disagg_prefill_dp_rank" in inspect.signature(sender_class).parameters:  # #27546, 0.5.16
            placed = (placement,)
    with _dp_width(manager, width, balance):
        return sender_class(manager, bootstrap, room, *ranks, *placed)


@contextmanager
def _dp_width(manager: Any, ranks: int, balance: str) -> Iterator[None]:  # pragma: no cover - conformance venv
    """The attention DP width and load-balance method where the release's sender reads them, for the call only:
    ``get_parallel().num_dp_ranks`` (0.5.22 on) or ``get_parallel().dp_size`` (0.5.21) through the parallel
    context's own ``override``; the published server arguments through SGLang's test override
    ``get_context().override_server_args`` where ``override`` does not take them (0.5.17-0.5.20); the manager's
    ``server_args`` (0.5.16 and earlier: to 0.5.13 there is no runtime context, 0.5.14-0.5.16 have one without
    ``override_server_args``)."""
    given = vars(getattr(manager, "server_args", SimpleNamespace()))
    manager.server_args = SimpleNamespace(**{**given, "dp_size": ranks, "load_balance_method": balance})
    try:
        from sglang.srt.runtime_context import get_context, get_parallel
    except ImportError:  # 0.5.16 and earlier: the sender reads kv_mgr.server_args
        yield
        return
    parallel = get_parallel()
    dp_field = "num_dp_ranks" if "num_dp_ranks" in dir(type(parallel)) else "dp_size"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(parallel.override(**{dp_field: ranks, "load_balance_method": balance}))
        except ValueError:  # "unknown parallel field(s)": the width is a server argument
            publish = getattr(get_context(), "override_server_args", None)
            if publish is not None:  # 0.5.17-0.5.20 read the published server arguments
                stack.enter_context(publish(dp_size=ranks, load_balance_method=balance))
            # 0.5.14-0.5.16 have a runtime context but read the manager's server_args (set above)
        yield


def sglang_send_kv_chunk(  # pragma: no cover - conformance venv
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> tuple[KvChunk | None, PrefillSendState]:
    """The function-level ``send_kv_chunk`` unit (P9-P14, M1) on SGLang's own ``_send_kv_chunk`` and a real
    ``CommonKVSender`` whose page counter is set from ``state``: one chunk of a plain (unsegmented) send."""
    from sglang.srt.disaggregation import prefill
    from sglang.srt.disaggregation.common.conn import CommonKVManager

    room = 4242
    manager = _Manager(None, room, _prepare_state(CommonKVManager))
    sender = _common_sender(manager, room)
    sender.init(state.num_pages, 0)
    sender.curr_idx = state.curr_idx
    sched = _duck_scheduler(
        prefill, req_to_token, page_size, translate=lambda t: t, staging=False, state_types=[], window=1,
        ring_size=1, set_buf=[],
    )  # fmt: skip
    fields: dict[str, Any] = dict(
        extend_end=extend_end, disagg_kv_sender=sender, start_send_idx=state.start_send_idx,
        disagg_decode_prefix_len=state.decode_prefix_len,
        extend_range=_extend_range(0, extend_end),  # the 0.5.21 spelling of extend_end (SGLang's own Range)
    )  # fmt: skip
    req: Any = release_request("r0", [0] * state.origin_len, req_pool_idx=state.req_pool_idx, scheduled=fields)
    sched._send_kv_chunk(req, last_chunk=last_chunk)
    new_state = replace(state, start_send_idx=req.start_send_idx, curr_idx=sender.curr_idx)
    if not manager.raw:
        return None, new_state
    assert len(manager.raw) == 1, "a plain send is one transfer"
    (pages, index_slice, is_last) = manager.raw[0]
    return KvChunk(pages, index_slice.start, state.start_send_idx, req.start_send_idx, is_last), new_state


def sglang_decode_page_indices(  # pragma: no cover - conformance venv
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> Any:
    """The function-level ``decode_page_indices`` unit on SGLang's own ``DecodePreallocQueue._transfer_page_indices``
    (``self`` is unused) over the row slice ``pop_preallocated`` takes."""
    from sglang.srt.disaggregation.decode import DecodePreallocQueue, DecodeRequest

    kv = req_to_token[req_pool_idx][decode_prefix_len:origin_input_len]
    # ``self`` and the request are not read; a DecodeRequest of stand-ins keeps the call within its annotations
    request = DecodeRequest(req=cast(Any, SimpleNamespace()), kv_receiver=cast(Any, None))
    return DecodePreallocQueue._transfer_page_indices(cast(Any, None), request, kv, page_size)


def _translation(case: PrefillCase, device: str) -> Any:  # pragma: no cover - conformance venv
    """``translate_kv_indices_for_transfer`` of a unified pool whose page table is the case's, or the identity."""
    if case.translation is None:
        return lambda t: t
    v2p = torch.tensor(case.translation, dtype=torch.int64, device=device)
    try:
        from sglang.kernels.ops.memory.virtual_slot import translate_token_ids
    except ImportError:  # to 0.5.21: the unified allocator's own MultiEndedAllocator.translate_kv_loc
        full = _multi_ended(v2p, case.page_size)
        return lambda t: full.translate_kv_loc(t.to(torch.int64))
    return lambda t: translate_token_ids(loc=t, v2p=v2p, page_size=case.page_size)


def _swa_translation(case: PrefillCase, device: str) -> Any:  # pragma: no cover - conformance venv
    """The release's own full-to-SWA translation over the case's SWA pool (``swa_pages``), bound to SGLang's
    allocator: on a unified pool (a page table, ``translation``) ``UnifiedSWATokenToKVPoolAllocator``'s
    ``translate_swa_indices_for_transfer`` over its SWA sub-pool's ``MultiEndedAllocator`` whose page table maps each
    virtual page of the row to its SWA page; otherwise ``SWATokenToKVPoolAllocator``'s (before 0.5.20
    ``translate_loc_from_full_to_swa``) over an ``SWAKVPool`` holding the full-to-SWA map (SGLang's own layout: a
    slot per full-pool id, then the ``-1`` sentinel). The maps are state injection; the pools' buffers are never
    read. None without an SWA pool of its own."""
    if case.swa_pages is None:
        return None
    ps, row = case.page_size, case.row
    if case.translation is not None and (unified := _unified_swa_allocator()) is not None:
        v2p = torch.zeros(len(case.translation), dtype=torch.int64, device=device)
        for i in range(0, case.length, ps):
            v2p[row[i] // ps] = case.swa_pages[i // ps]
        own = unified.__new__(unified)
        own.swa_attn_allocator = _multi_ended(v2p, ps)
        return own.translate_swa_indices_for_transfer
    mapping = torch.zeros((max(row) // ps + 2) * ps + 1, dtype=torch.int64, device=device)
    mapping[-1] = -1
    for i, loc in enumerate(row):
        mapping[loc] = case.swa_pages[i // ps] * ps + i % ps
    from pdverify.targets.sglang_decode import _release_class, _swa_allocator_class

    pool_class, allocator_class = _release_class("SWAKVPool", "swa_memory_pool", "memory_pool"), _swa_allocator_class()
    pool = pool_class.__new__(pool_class)
    allocator = allocator_class.__new__(allocator_class)
    # the allocator builds the map and registers it with its pool (register_mapping); older ones read their own
    pool.full_to_swa_index_mapping = allocator.full_to_swa_index_mapping = mapping
    allocator._kvcache, allocator.page_size = pool, ps
    name = "translate_swa_indices_for_transfer"
    return getattr(allocator, name if hasattr(allocator_class, name) else "translate_loc_from_full_to_swa")


def _unified_swa_allocator() -> Any:  # pragma: no cover - conformance venv
    """``UnifiedSWATokenToKVPoolAllocator`` where the release has a unified hybrid SWA pool, else None."""
    try:
        module = importlib.import_module("sglang.srt.mem_cache.allocator.unified_hybrid_swa")
    except ImportError:
        return None
    return getattr(module, "UnifiedSWATokenToKVPoolAllocator", None)


def _multi_ended(v2p: torch.Tensor, page_size: int) -> Any:  # pragma: no cover - conformance venv
    """A ``MultiEndedAllocator`` holding only its page table and page size (all ``translate_kv_loc`` reads)."""
    try:
        allocators = importlib.import_module("sglang.srt.mem_cache.allocator.unified_sub_pool")
    except ImportError:  # 0.5.19: its own module
        allocators = importlib.import_module("sglang.srt.mem_cache.multi_ended_allocator")
    multi_ended: Any = allocators.MultiEndedAllocator
    own = multi_ended.__new__(multi_ended)
    # the page size it translates by: pool_page_size (0.5.20 on), page_size (0.5.19; no DCP there)
    own.virtual_to_physical, own.pool_page_size, own.page_size = v2p, page_size, page_size
    return own


def _stage_metrics() -> Any:  # pragma: no cover - conformance venv
    """SGLang's own scheduler stage recorder with timing off (0.5.20 on; 0.5.19's bootstrap queue has none)."""
    try:
        from sglang.srt.observability.scheduler_stage_metrics import SchedulerStageMetricsRecorder
    except ImportError:
        return None
    return SchedulerStageMetricsRecorder(enabled=False)


def _extend_range(start: int, end: int) -> Any:  # pragma: no cover - conformance venv
    """A request's chunk as 0.5.21 holds it (``Req.set_extend_range``: SGLang's own ``Range``); later releases read
    ``extend_end``, and have no ``Range`` to give."""
    try:
        from sglang.srt.utils import common
    except ImportError:  # to 0.5.1 utils is one module: no Range (the chunk's end is fill_ids)
        return None
    extend_range = getattr(common, "Range", None)  # 0.5.21's: gone from 0.5.22
    return None if extend_range is None else extend_range(start, end)


def sglang_prefill_exchange(case: PrefillCase, device: str) -> PrefillTrace:  # pragma: no cover - conformance venv
    """The prefill exchange of ``case``. Where the release has a runtime context (0.5.22 on) it runs under the context
    SGLang's own ``ServerArgs`` make for a prefill scheduler (``sglang_context``: every leaf at the server's
    default), the case's chunked-prefill size and request tracing set through the bags' own ``override``; before,
    ``prefill.get_schedule`` and ``conn.get_observability`` are patched (``_patched_schedule``,
    ``_bootstrap_world``)."""
    leaves: dict[str, dict[str, Any]] = {"get_observability": {"enable_trace": case.trace_requests}}
    if case.chunked_prefill_size is not None:
        leaves["get_schedule"] = {"chunked_prefill_size": case.chunked_prefill_size}
    elif case.dcp_max_tokens is not None:  # the ceiling that sizes the DCP pack buffer
        leaves["get_schedule"] = dcp_schedule(case.dcp_max_tokens, case.page_size)
    # a PP stage's server: SGLang's own validation of --pp-size 2 (it turns optimistic prefill off, for one)
    own = published("prefill", leaves, (("pp_size", 2),) if case.pp_consensus is not None else ())
    if own is None:
        return _exchange(case, device, config_published=False)
    with own:
        return _exchange(case, device, config_published=True)


def _exchange(case: PrefillCase, device: str, *, config_published: bool) -> PrefillTrace:  # pragma: no cover
    from sglang.srt.disaggregation import prefill

    room = case.bootstrap_room
    manager_class = _common_manager()
    manager = _Manager(case, room, _prepare_state(manager_class) if manager_class is not None else None)
    state_types = _state_types(case.state_types)
    manager.kv_args.state_types = state_types  # as the pool registers them
    registrations: list[tuple[int, int]] = []
    with _bootstrap_world(case, manager, room, registrations, patch_trace=not config_published) as bootstrap:
        # a decode prefix reaches NIXL's sender on 0.5.11 (the backend its server requires for one)
        nixl = prefix_sender_is_nixl(case.decode_prefix, release_with_prefix("prefill_exchange", case.decode_prefix))
        sender = _common_sender(manager, room, case, nixl=nixl, bootstrap=bootstrap)
    from sglang.srt.disaggregation.base.conn import KVPoll

    manager.defer_decode_allocation = manager.deferred_bootstrap is not None
    if manager.request_status[room] != KVPoll.Failed:  # decode's destinations arrive (the bootstrap thread's part)
        manager.request_status[room] = KVPoll.WaitingForInput

    width = case.length + case.page_size
    table = torch.zeros((case.req_pool_idx + 1, width), dtype=torch.int32, device=device)
    table[case.req_pool_idx, : case.length] = torch.tensor(case.row, dtype=torch.int32, device=device)
    translate = _translation(case, device)

    set_buf: list[str] = []
    sched = _duck_scheduler(
        prefill,
        table,
        case.page_size,
        translate=translate,
        staging=case.chunked_prefill_size is not None,
        state_types=state_types,
        window=case.window,
        ring_size=case.ring_size,
        set_buf=set_buf,
        translate_swa=_swa_translation(case, device),
    )
    if case.state_types and not state_types:  # one payload chosen by the KV pool's type (to 0.5.11, before #24932)
        pool = object.__new__(_payload_pool_class(prefill, case.state_types))
        sched.token_to_kv_pool_allocator.get_kvcache = lambda: pool

    buffers = _BufferPool(case.aux_index, busy_polls=case.buffer_waits)

    dropped: list[str] = []
    sched.handle_bootstrap_failure = lambda r: dropped.append(r.rid)  # the scheduler's abort of a failed request
    # to 0.5.x the queue aborts a failed request itself (prepare_abort) and streams it out: the drop is the stream
    sched.stream_output = lambda reqs, *args, **kw: dropped.extend(r.rid for r in reqs)
    sched.processed_tokens_counter = 0
    sched.enable_metrics = False  # read where a failed bootstrap is counted (0.5.12)
    sched.enable_hicache_storage = False  # read where a failed bootstrap releases its prefetch (0.5.11, 0.5.12)
    sched.attn_cp_cpu_group = sched.attn_tp_cpu_group = one_rank_gloo()
    if case.pp_consensus is not None and not config_published:
        # what a PP stage's pass reads of its server to 0.5.21 (optimistic prefill's attempts): SGLang's own
        # ServerArgs for --pp-size 2, through its validation where the release builds them (builds_server_args)
        sched.server_args = server_args("prefill", (("pp_size", 2),), resolved=builds_server_args())
    sched.tree_cache = None

    class Queue(prefill.PrefillBootstrapQueue):  # type: ignore[misc, unused-ignore]
        def __init__(self) -> None:
            self.scheduler = sched
            self.token_to_kv_pool = sched.token_to_kv_pool_allocator  # where 0.5.16 and earlier read the page size
            self.req_to_metadata_buffer_idx_allocator = buffers.allocator
            self.queue: list[Any] = []
            self.pp_size, self.pp_rank = 1, 0
            # to 0.5.9: the poll's all-reduce group, the rank it logs
            self.gloo_group, self.tp_rank = one_rank_gloo(), 0
            self.scheduler_stage_metrics = _stage_metrics()

    digests: list[tuple[int, ...] | None] = []
    checksum_kernel = _kv_checksum(sched, case.kv_checksum, digests)
    rid = f"{_health_check_prefix()}r0" if case.health_check else "r0"
    fields: dict[str, Any] = dict(
        extend_end=0,
        disagg_kv_sender=sender,
        pending_bootstrap=True,
        metadata_buffer_index=case.aux_index if case.held_buffer else -1,
        prefix_len=(case.early_prefix or 0) + case.host_hit_length,
        host_hit_length=case.host_hit_length,
        **case.extra,  # registered request fields
        early_send_prefix_end=None,
        start_send_idx=0,
        disagg_decode_prefix_len=0,
        extend_range=None,  # 0.5.21's chunk (extend_range.end its end), set with extend_end below
    )
    # SGLang's own Req (every release): its KV bookkeeping, time stats and defaults; the driver sets only what the
    # scheduler would have set by then (the sender, the buffer, the prefix, the chunk)
    req: Any = release_request(rid, [0] * case.length, bootstrap_room=room, req_pool_idx=case.req_pool_idx,
                               scheduled=fields)  # fmt: skip
    # 0.5.21 counts the cached prefix in prefix_indices (prefix_len from 0.5.22)
    req.prefix_indices = torch.zeros(req.prefix_len, dtype=torch.int64)
    assert getattr(sender, "supports_host_tensor_indices", False) == case.host_tensor_indices, type(sender)
    sched.enable_overlap = case.overlap
    sched.forward_stream = None  # recorded on by the overlap early send (the current stream on CUDA)
    shim = (case.host_tensor_indices or case.overlap) and not torch.cuda.is_available()
    with (
        checksum_kernel,
        _patched_schedule(prefill, None if config_published else case.chunked_prefill_size),
        mock.patch.object(prefill, "torch", TorchWithoutCuda()) if shim else contextlib.nullcontext(),
        # all-CP-ranks filtering reads it at send time (DSA cache layer split: off, one cache per rank)
        _parallel_override(
            enable_dsa_cache_layer_split=False,
            # Mooncake's sender reads it to account a sharded rank's pages (with a KV-shard rank split only)
            **({"enable_kv_cache_sharding": case.kv_sharded} if case.host_tensor_indices else {}),
        ),
        _early_send_switch(case.early_send_env),
    ):
        if case.early_send_blocked == "bootstrapping" and case.early_prefix is not None:
            req.extend_end = case.chunk_ends[0]  # the first batch runs while the request bootstraps
            req.extend_range = _extend_range(req.prefix_len, req.extend_end)
            sched.maybe_send_cached_prefix_chunk(req)
        # the bootstrap queue's own pass (pop_bootstrapped: poll, drop a failed request, finalise), polled again
        # while the request waits for a metadata buffer; the poll's all-reduce runs over a one-rank gloo group
        queue = Queue()
        queue.queue = [req]
        bootstraps: list[bool] = []
        first = _FirstStage()
        late = int(case.pp_own_late)
        if late:  # decode's destinations (and its prefix length) have not reached this stage's sender yet
            arrival = (manager.request_status[room], manager.req_to_decode_prefix_len.pop(room))
            manager.request_status[room] = KVPoll.Bootstrapping
        while not dropped and (not bootstraps or not bootstraps[-1]) and len(bootstraps) <= case.buffer_waits + late:
            buffers.poll()
            if case.pp_consensus is None:
                bootstraps.append(bool(queue.pop_bootstrapped()))
            else:  # a later PP stage: its own bootstrap step, given the first stage's poll and its own
                own = manager.request_status[room]
                try:
                    bootstraps.append(bool(pp_bootstrap_step(queue, sched, req.rid, case.pp_consensus, own, first)))
                except AssertionError as exc:
                    if "/pdverify/" in traceback.extract_tb(exc.__traceback__)[-1].filename:
                        raise  # the driver's own check, not the release's assert
                    raise StageStepRaised.of(exc) from exc
            if late and len(bootstraps) == 1:  # they arrive before the next step (the bootstrap thread's part)
                manager.request_status[room], manager.req_to_decode_prefix_len[room] = arrival
        # a PP stage may keep a request the stages never agree on again (the property judges); one stage finalises
        assert dropped or bootstraps[-1] or case.pp_consensus is not None, f"bootstrap never finalised: {bootstraps}"
        kept = not dropped and not bootstraps[-1]
        # a sender dropped at bootstrap was never initialised: it announced no pages
        trace = PrefillTrace(getattr(sender, "num_kv_indices", 0), manager.transfers, [req.start_send_idx])
        trace.bootstraps, trace.buffers_taken = bootstraps, buffers.taken
        trace.dropped = bool(dropped)
        for k, end in enumerate([] if dropped or kept else case.chunk_ends):  # only a bootstrapped request runs
            req.extend_range = _extend_range(req.extend_end if k else req.prefix_len, end)
            req.extend_end = end
            # the chunk's end in the spellings of earlier releases: fill_ids (to 0.5.12), fill_len (0.5.13, 0.5.14)
            req.fill_ids, req.fill_len = [0] * end, end
            if k == 0:
                if case.early_prefix is not None and case.early_send_blocked != "bootstrapping":
                    # a HiCache load-back pending: 0.5.23's scheduler passes allow_send=False (#44070); 0.5.22's
                    # call site has no such argument and calls it as always (scheduler.py:4527)
                    takes = "allow_send" in inspect.signature(sched.maybe_send_cached_prefix_chunk).parameters
                    with _counted(manager, req):
                        if case.early_send_blocked == "load_back" and takes:
                            sched.maybe_send_cached_prefix_chunk(req, allow_send=False)
                        else:
                            sched.maybe_send_cached_prefix_chunk(req)
                trace.start_send_idx.append(req.start_send_idx)
            with _counted(manager, req):
                send_chunk(sched, req, last_chunk=k == len(case.chunk_ends) - 1)
            trace.start_send_idx.append(req.start_send_idx)
    trace.metadata_sets = len(set_buf)
    trace.digests = digests
    names = {v: k for k, v in vars(KVPoll).items() if not k.startswith("_")}
    trace.statuses = [names[status] for room_, status in manager.status if room_ == room]
    trace.registrations = registrations
    return trace


class _PrevStage:
    """The PP group as a later stage's ``pp_sync_polls`` reads it: the previous stage sends the first stage's polls
    (``recv_object``); this stage is the last, so it forwards nothing (a stand-in for ``GroupCoordinator``'s
    point-to-point wire, which needs a second process)."""

    def __init__(self, polls: list[Any]) -> None:
        self.polls, self.received_from = polls, list[int]()

    def recv_object(self, src: int, **_: Any) -> list[Any]:
        self.received_from.append(src)
        return list(self.polls)


class _StageStatuses:
    """Every stage's status of the room as the first stage's ``PPConsensusStore`` collects them (``collect``: the
    first stage's, then this stage's) - a stand-in for the store's socket replication, which needs a process per
    stage."""

    def __init__(self, room: int, statuses: list[Any]) -> None:
        self.room, self.statuses = room, statuses

    def collect(self, room: int) -> list[Any]:
        if room != self.room:
            raise AssertionError(f"the store was asked for room {room}, the request's is {self.room}")
        return list(self.statuses)


class StageStepRaised(AssertionError):
    """A later PP stage's bootstrap step (the release's own) failed one of its own asserts: the stage's scheduler dies
    there (its event loop does not catch it). The message names the assert: ``file:line`` and its source line."""

    @classmethod
    def of(cls, exc: AssertionError) -> StageStepRaised:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} `{frame.line}`"
        return cls(f"the PP stage's bootstrap step raised AssertionError at {where}" + (f": {exc}" if str(exc) else ""))


class _Stage:
    """A later stage's scheduler as the release's PP steps read it: the bootstrap queue, the waiting queue, the PP
    group's rank and the previous stage's lists (``_pp_recv_pyobj_from_prev_stage``: the first stage's own ready and
    failed rids, as its ``get_rids`` lists them); the release's ``SchedulerPPMixin`` methods (``get_rids``, by which
    the stage polls its own senders, ...) bound to it; anything else is the driver's scheduler's (its all-reduce
    groups)."""

    def __init__(self, sched: Any, queue: Any, prev: list[list[str]]) -> None:
        self._sched, self._prev = sched, prev
        self.disagg_prefill_bootstrap_queue, self.waiting_queue = queue, list[Any]()
        self.pp_group = SimpleNamespace(is_first_rank=False, is_last_rank=True)
        self.tp_worker = SimpleNamespace(get_attention_tp_cpu_group=lambda: sched.attn_tp_cpu_group)

    def _pp_recv_pyobj_from_prev_stage(self) -> list[list[str]]:
        return [list(rids) for rids in self._prev]

    def __getattr__(self, name: str) -> Any:
        from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin

        if hasattr(SchedulerPPMixin, name):  # a method, or a static one, of the release's PP scheduler
            return inspect.getattr_static(SchedulerPPMixin, name).__get__(self, type(self))
        return getattr(self._sched, name)


class _FirstStage:
    """Whether the first stage still holds the request in its bootstrap queue (its ``get_rids`` lists it, to 0.5.6.post2
    its pop hands it on): until an agreement that lists it failed - to 0.5.6.post2 its own failed poll, at the first
    step - which the first stage applies too: its own sender failed, it drops the request. (A request ready there is
    popped there as here: the stages' metadata buffers are taken and freed alike.)"""

    def __init__(self) -> None:
        self.holds = True


def pp_bootstrap_step(  # pragma: no cover - conformance venv
    queue: Any, sched: Any, rid: str, consensus: str, own: Any, first: _FirstStage
) -> list[Any]:
    """A later stage's bootstrap step on a pipeline-parallel prefill server (stage 1 of 2) for a queue holding the
    request ``rid``: the first stage's sender polled ready (``consensus`` ``good``) or failed (``bad``), this stage's
    own polls ``own`` (its manager's status). The stages' agreement is each release's own: 0.5.22 on, the first
    stage's ``check_status_pp_consensus`` (the least of every stage's status) handed on through the PP group to the
    release's ``SchedulerPPMixin.process_bootstrapped_queue`` (``poll_and_all_reduce_prefill_pp``: ``pp_sync_polls``
    receives it); 0.5.7-0.5.21, this stage's own ``_pp_pd_get_bootstrapped_ids`` (the first stage's ready rids
    intersected with this stage's ``get_rids``, failed ones united) given to ``process_bootstrapped_queue`` as the
    PP event loop gives it on the last stage; 0.5.1-0.5.6.post2, the call the PP event loop
    (``event_loop_pp_disagg_prefill``, which cannot run here: it loops for ever over a real PP group) makes on a
    later stage: ``pop_bootstrapped(rids_to_check=...)`` with the rids the first stage popped - it pops a request its
    sender polls ready or failed. ``first``: whether the first stage still holds the request (its lists name it only
    then). Returns the requests the step bootstrapped (moved to the waiting queue)."""
    queue.pp_size, queue.pp_rank = 2, 1
    try:
        from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin

        step = getattr(SchedulerPPMixin, "process_bootstrapped_queue", None)
    except ImportError:  # the mixin came in 0.5.4; the PP loop was prefill's own before
        step = None
    if step is None:  # the first stage popped it: ready when its buffer frees (as here), failed at once
        popped = list(queue.pop_bootstrapped(rids_to_check=[rid] if first.holds else []))
        first.holds = first.holds and consensus == "good"
        return popped
    lists = ([[rid], []] if consensus == "good" else [[], [rid]]) if first.holds else [[], []]
    stage = _Stage(sched, queue, lists)
    if "bootstrapped_rids" in inspect.signature(step).parameters:
        # the scheduler is a stand-in where ``Scheduler`` is annotated
        agreed = stage._pp_pd_get_bootstrapped_ids()  # the release's own (0.5.7-0.5.21), bound to the stage
        first.holds = first.holds and rid not in agreed[1]
        # the consensus is two lists, as the PP loop passes it, where SGLang annotates Optional[List[str]] (A3)
        result = step(cast(Any, stage), cast(Any, agreed))
        if result is None or list(result[0]) != [r.rid for r in stage.waiting_queue]:
            raise AssertionError(
                f"process_bootstrapped_queue returned {result!r}, moved {[r.rid for r in stage.waiting_queue]}"
            )
        return stage.waiting_queue
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.common.conn import CommonKVManager

    first_poll = KVPoll.WaitingForInput if consensus == "good" else KVPoll.Failed
    store = SimpleNamespace(request_status=_StageStatuses(queue.queue[0].bootstrap_room, [first_poll, own]))
    least = CommonKVManager.check_status_pp_consensus(cast(Any, store), store.request_status.room)
    group = _PrevStage([int(cast(Any, least))])  # the first stage hands on its polls as ints
    sched.pp_group, queue.pp_poll_sync_work_list = group, []
    step(cast(Any, stage))
    if group.received_from != [0]:
        raise AssertionError(f"the stage received the first stage's polls from {group.received_from}, expected [0]")
    return stage.waiting_queue


def send_chunk(sched: Any, req: Any, *, last_chunk: bool) -> None:  # pragma: no cover - conformance venv
    """One call of the release's ``send_kv_chunk``: ``(req, last_chunk)`` from 0.4.6.post5 (#6019); to 0.4.6.post4
    ``(req, token_id)``, the last chunk being the one called with the request's first output token."""
    if "last_chunk" in inspect.signature(sched.send_kv_chunk).parameters:
        sched.send_kv_chunk(req, last_chunk=last_chunk)
    else:
        sched.send_kv_chunk(req, token_id=1 if last_chunk else None)


def _state_types(names: tuple[str, ...]) -> list[Any]:  # pragma: no cover - conformance venv
    """The release's ``StateType`` members named ``names``; none where the case has no state, or where the release
    has no ``StateType`` (it came with the per-type state lists, #24932, 0.5.12; before, one payload)."""
    from pdverify.targets.sglang_decode import _state_lists_form, _state_type  # NSA for DSA before the rename

    if not names or not _state_lists_form():  # to 0.5.11 the pool's class picks the one payload (_payload_pool_class)
        return []
    return [_state_type(k) for k in names]


def _payload_pool_class(prefill: Any, names: tuple[str, ...]) -> Any:  # pragma: no cover - conformance venv
    """The KV pool class whose ``isinstance`` check picks the one state payload of ``names`` in the release's
    ``send_kv_chunk`` (0.5.3.post3-0.5.11, #10912): ``SWAKVPool`` (the window's SWA pages), ``NSATokenToKVPool`` (the
    index-K pages); a later state type, or two, is the per-type lists' input (``state_lists``), never given."""
    classes = {("SWA",): "SWAKVPool", ("DSA",): "NSATokenToKVPool"}
    if names not in classes:
        raise ValueError(f"state types {names}: before the per-type state lists a release sends one, SWA or DSA")
    return getattr(prefill, classes[names])


def _health_check_prefix() -> str:  # pragma: no cover - conformance venv
    """The rid prefix SGLang's health check gives its requests (read where a health-check case is run: the KV
    checksum's, 0.5.21 on)."""
    from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX

    return str(HEALTH_CHECK_RID_PREFIX)


@contextmanager
def _early_send_switch(on: bool) -> Iterator[None]:  # pragma: no cover - conformance venv
    """``SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`` set to ``on`` for the call, where the release has the early
    cached-prefix send (#29316, 0.5.15; the input feature ``early_send``: an earlier release is never given a case
    with an early prefix, and has no switch to set)."""
    try:
        environ: Any = importlib.import_module("sglang.srt.environ")
    except ImportError:  # no environ module to 0.5.1
        environ = None
    switch = getattr(getattr(environ, "envs", None), "SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX", None)
    with switch.override(on) if switch is not None else contextlib.nullcontext():
        yield


@contextmanager
def _counted(manager: _Manager, req: Any) -> Iterator[None]:  # pragma: no cover - conformance venv
    """Each transfer's token count, where the release's sender forwards none (to 0.5.16: ``num_kv_tokens`` came with
    #32837): read off the release's own ``req.start_send_idx``, which the call moves by the tokens it sent (one
    call makes one transfer there: no DCP pack split before 0.5.21)."""
    before, start = len(manager.transfers), req.start_send_idx
    yield
    added = manager.transfers[before:]
    if added and all(t.num_kv_tokens is None for t in added):
        assert len(added) == 1, f"one call made {len(added)} transfers without token counts"
        manager.transfers[-1] = replace(added[0], num_kv_tokens=int(req.start_send_idx) - int(start))


@contextmanager
def _parallel_override(**fields: Any) -> Iterator[None]:  # pragma: no cover - conformance venv
    """SGLang's ``get_parallel().override(**fields)``, for the call only. To 0.5.20 ``override`` accepts only the
    derived widths (``_PARALLEL_FIELDS``), while the code reads server-argument leaves of the ``parallel`` namespace too
    (``enable_dsa_cache_layer_split`` in the all-CP-ranks filter): those go into the scoped overrides, which the
    ``__getattr__`` of 0.5.19 and 0.5.20 reads first; 0.5.18's reads a leaf only from the published config bag, so
    with none published a bag of just those leaves stands in for it. Both are restored after the call."""
    try:
        from sglang.srt import runtime_context
    except ImportError:  # to 0.5.13: no runtime context, every leaf is read from the manager's server arguments
        yield
        return

    parallel = runtime_context.get_parallel()
    known = getattr(runtime_context, "_PARALLEL_FIELDS", None)
    leaves = {k: v for k, v in fields.items() if known is not None and k not in known}
    if "_config" not in getattr(type(parallel), "__slots__", ()):
        # to 0.5.16 the namespace holds the derived widths only: the leaves are read from the KV manager's own
        # server arguments (``_Manager.server_args``), never from here
        with parallel.override(**{k: v for k, v in fields.items() if k not in leaves}):
            yield
        return
    saved, saved_config = dict(parallel._overrides), parallel._config
    parallel._overrides.update(leaves)
    if leaves and saved_config is None:
        try:
            [getattr(parallel, k) for k in leaves]
        except (AttributeError, ValueError):  # the leaves are read from a published bag only
            parallel._config = SimpleNamespace(_fields=dict(leaves), **leaves)
    try:
        with parallel.override(**{k: v for k, v in fields.items() if k not in leaves}):
            yield
    finally:
        parallel._overrides, parallel._config = saved, saved_config


def metadata_allocator(index: int, *, free: bool) -> Any:  # pragma: no cover - conformance venv
    """SGLang's own ``ReqToMetadataIdxAllocator`` with its free list set (state injection, as the page allocators'
    are): buffer ``index`` the one left, free now or (``free=False``) held by another request until freed."""
    from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator

    allocator = ReqToMetadataIdxAllocator(1)
    allocator.size, allocator.free_slots = index + 1, deque([index] if free else [])
    return allocator


class _BufferPool:  # pragma: no cover - conformance venv
    """SGLang's own metadata-buffer allocator (``metadata_allocator``): the case's buffer is held by another request
    for the first ``busy_polls`` polls (``poll``: called before each), then freed; ``taken`` counts the buffers
    handed out."""

    def __init__(self, index: int, *, busy_polls: int) -> None:
        self.index, self.busy, self.freed = index, busy_polls, 0
        self.allocator = metadata_allocator(index, free=False)

    def poll(self) -> None:
        if self.busy == 0 and not self.freed:
            self.allocator.free(self.index)  # the request that held it finished
            self.freed = 1
        self.busy -= 1

    @property
    def taken(self) -> int:
        return self.freed - len(self.allocator.free_slots)


_SERVER: list[Any] = []
"""SGLang's own bootstrap server, one per process (started on first use, on a free local port)."""


def _bootstrap_server() -> Any:  # pragma: no cover - conformance venv
    """SGLang's ``CommonKVBootstrapServer`` on 127.0.0.1: the HTTP server prefill's DP registration posts to, run as
    the prefill node runs it (its aiohttp app on a thread of its own), waited for until it answers ``/health``."""
    if not _SERVER:
        import socket
        import time

        import requests
        from sglang.srt.disaggregation.common.conn import CommonKVBootstrapServer

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = CommonKVBootstrapServer("127.0.0.1", port)
        for _ in range(200):
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"SGLang's bootstrap server on 127.0.0.1:{port} never answered /health")
        _SERVER.append(server)
    return _SERVER[0]


@contextmanager
def _bootstrap_world(
    case: PrefillCase, manager: Any, room: int, registrations: list[tuple[int, int]], *, patch_trace: bool = True
) -> Iterator[str]:  # pragma: no cover - conformance venv
    """What ``CommonKVSender.__init__`` meets besides its manager, for the call only: SGLang's own
    ``DeferredBootstrap`` with the case's room fresh, opened by another sender or cancelled; SGLang's own bootstrap
    server (``_bootstrap_server``), whose address it yields for the sender: each DP registration the sender posts goes
    to it through ``requests`` and counts in ``registrations`` as the server answered it and as decode's own query
    (``CommonKVReceiver.query_prefill_dp_ranks``) reads the room's rank back; request tracing switched on for the
    sender's module (``TraceReqContext`` is SGLang's: without an OpenTelemetry exporter it reports tracing off) -
    with ``patch_trace`` through a patched ``conn.get_observability``, else as the published context has it."""
    import requests

    if case.deferred_room is not None:  # 0.5.22 on (#40703: the input feature ``allocation_policy``)
        from sglang.srt.disaggregation.common.bootstrap import DeferredBootstrap

        manager.deferred_bootstrap = DeferredBootstrap(timeout=600.0)
        if case.deferred_room == "duplicate":
            manager.deferred_bootstrap.open(room, object())
        elif case.deferred_room == "cancelled":
            manager.deferred_bootstrap.fail(room)
    if case.attention_dp is not None:
        manager.attn_dp_rank = case.attention_dp[1]
    if case.trace_requests:
        manager.sender_trace_module = "disaggregation"
        manager.enable_trace = True  # the switch 0.5.21 and 0.5.22's Mooncake sender reads

    try:
        conn: Any = importlib.import_module("sglang.srt.disaggregation.common.conn")
    except ImportError:  # no common/conn.py to 0.4.7
        conn = None
    if conn is None or not hasattr(conn.CommonKVReceiver, "query_prefill_dp_ranks"):
        # before #19168 (0.5.10) prefill's sender registers no DP rank (the input feature dp_rank_query: a case
        # with attention DP is not given to such a release), and nothing else of it reaches the bootstrap server
        yield "10.0.0.1:8998"
        return
    server = _bootstrap_server()
    server.room_to_dp_rank.pop(room, None)  # a room an earlier example registered

    address = f"127.0.0.1:{server.port}"

    def post(url: str, json: dict[str, Any], timeout: float) -> Any:
        response = requests.post(url, json=json, timeout=timeout)
        if url.endswith("/query_dp_ranks"):  # decode's own query: a plain post to 0.5.16 (a session after)
            return response
        assert url.endswith("/register_dp_rank"), url
        # what decode's own query (CommonKVReceiver.query_prefill_dp_ranks) then reads back for the room
        answer = conn.CommonKVReceiver.query_prefill_dp_ranks(address, [int(json["bootstrap_room"])])
        if response.status_code == 200 and str(json["bootstrap_room"]) in answer:
            registrations.append((int(json["bootstrap_room"]), int(answer[str(json["bootstrap_room"])])))
        return response

    with (
        # requests as SGLang's module sees it, its post a spy that calls through (decode's query uses its sessions)
        mock.patch.object(conn, "requests", SimpleNamespace(**{**vars(requests), "post": post})),
        # read by 0.5.23's sender; 0.5.22's reads the manager's enable_trace
        mock.patch.object(
            conn, "get_observability", lambda: SimpleNamespace(enable_trace=case.trace_requests), create=True
        )
        if patch_trace
        else contextlib.nullcontext(),  # fmt: skip
    ):
        yield address
    server.room_to_dp_rank.pop(room, None)


CHECKSUM_ITEM = 4096
"""Bytes of one page of the registered KV buffer the checksum addresses."""
CHECKSUM_BASE = 1 << 40
"""The registered buffer's address: the stand-in kernel never dereferences it, it reads back which page each
address names."""


class OnDevice(torch.Tensor):
    """A CPU index tensor that passes ``KvChecksumComputer.compute``'s ``is_cuda`` asserts (the indices stay on CPU)."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override, unused-ignore]  # pragma: no cover - conformance venv
        return True


def on_device(indices: Any) -> Any:  # pragma: no cover - conformance venv
    """``indices`` - None, a tensor, or one tensor per state component (F5's fix) - as ``OnDevice`` tensors."""
    if indices is None:
        return None
    if isinstance(indices, (list, tuple)):
        return [t.as_subclass(OnDevice) for t in indices]
    return indices.as_subclass(OnDevice)


def _kv_checksum(
    sched: Any, enabled: bool, digests: list[tuple[int, ...] | None]
) -> contextlib.AbstractContextManager[Any]:
    """``--disaggregation-enable-kv-checksum`` with SGLang's own ``KvChecksumComputer`` and ``adler32_strided_checksum``
    (index selection, the per-item address arithmetic ``base + id * item_len``, the state-index rule). Only what
    cannot run on CPU is stood in for: the CUDA kernel, which here turns each address it is given back into the page
    it names (``(address - base) / item_len``) and digests those, and the ``is_cuda`` checks on the index tensors.
    The metadata buffers' ``set_kv_checksum`` records the pages each digest read (None: set to 0, undigested). The
    returned context patches the kernel for the run."""
    import zlib

    read: list[tuple[int, ...]] = []

    def set_kv_checksum(req: Any, digest: int, signature: int | None = None) -> None:  # 0.5.22: (req, digest)
        # a digest over no page never reaches the kernel (adler32_strided_checksum returns 1): an empty read
        digests.append((read.pop() if read else ()) if digest else None)

    sched.disagg_metadata_buffers.set_kv_checksum = set_kv_checksum
    sched.disagg_prefill_bootstrap_queue.kv_checksum_signature = 77
    sched.kv_checksum_computer = None
    if not enabled:  # checksum off (0.5.20 and earlier have no checksum module): a digest set is still recorded
        return contextlib.nullcontext()
    from sglang.kernels.ops.memory import adler32
    from sglang.srt.disaggregation.checksum import KvChecksumComputer

    class CpuKernel:  # the JIT module: the one piece that needs CUDA
        def adler32_strided(self, ptrs: Any, lens: Any, states: Any, total: int) -> None:
            offsets = [int(p) - CHECKSUM_BASE for p in ptrs.tolist()]
            assert all(o % CHECKSUM_ITEM == 0 for o in offsets), f"addresses off the page grid: {offsets[:4]}"
            pages = tuple(o // CHECKSUM_ITEM for o in offsets)
            read.append(pages)
            states[0] = zlib.adler32(repr(pages).encode())

        def adler32_reduce(self, states: Any, result: Any, n: int) -> None:
            result[0] = states[0]

    class Computer(KvChecksumComputer):  # type: ignore[misc, unused-ignore]
        def compute(self, kv_page_indices_gpu: Any, state_indices_gpu: Any = None) -> int:
            return int(super().compute(on_device(kv_page_indices_gpu), on_device(state_indices_gpu)))

    sched.kv_checksum_computer = Computer(
        torch.device("cpu"), kv_data_ptrs=[CHECKSUM_BASE], kv_item_lens=[CHECKSUM_ITEM]
    )
    return mock.patch.object(adler32, "_jit_adler32_module", lambda: CpuKernel())


def _parameters(fn: Any, name: str) -> Any:
    """The parameters of method ``name`` (``fn``, a function or bound method), seen through a decorator that hides
    them behind ``(*args, **kwargs)`` without ``functools.wraps`` (Mooncake's ``mooncake_trace_func`` on ``send``,
    0.5.13 on): the function named ``name`` the wrapper closes over."""
    fn = getattr(fn, "__func__", fn)
    parameters = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters.values()):
        for cell in getattr(fn, "__closure__", None) or ():
            inner = cell.cell_contents
            if inspect.isfunction(inner) and inner.__name__ == name:
                return _parameters(inner, name)
    return parameters


def release_with_prefix(unit: str, decode_prefix: int) -> str:
    """The installed release, refusing a decode prefix where it has none (decode-side prefixes came in 0.5.11)."""
    from pdverify.properties.releases import DECODE_PREFIXES
    from pdverify.targets.sglang_release import installed_release

    release = installed_release()
    if decode_prefix and DECODE_PREFIXES.not_applicable(release) is not None:
        raise ValueError(
            f"{unit}: sglang {release} has no decode-side prefixes (they came in 0.5.11); "
            f"decode_prefix={decode_prefix} is outside its input domain"
        )
    return release


def prefix_sender_is_nixl(decode_prefix: int, release: str) -> bool:
    """Whether a request with a decode prefix reaches NIXL's sender on ``release``: 0.5.11's server accepts
    --disaggregation-decode-enable-radix-cache only with the NIXL backend (server_args.py _handle_pd_disaggregation);
    Mooncake's carries a prefix from 0.5.12."""
    from pdverify.properties.releases import FROM_MOONCAKE_DECODE_PREFIX

    return decode_prefix > 0 and FROM_MOONCAKE_DECODE_PREFIX.not_applicable(release) is not None


def sglang_kv_sender(case: SenderCase, device: str) -> SenderTrace:  # pragma: no cover - conformance venv
    """SGLang's own KV sender on its own (``_common_sender``): ``init`` with the case's count and aux, then every
    send with the state lists where ``send`` takes them (0.5.3.post3 on) and the send's token count where it takes
    one (0.5.17 on); the real sender decides what goes with which transfer. To 0.4.6.post4 ``send`` takes the
    destination slice and last flag from its caller (prefill's send loop): each send is given the slice after the
    pages before it and the last flag on the final send, and K1's placement and last-flag clauses, the caller's
    there, do not apply (``FROM_SENDER_TRACKS``)."""
    room = 4242
    manager = _Manager(None, room, _prepare_state(_common_manager()))
    sender = _common_sender(manager, room)
    sender.init(case.num_pages, case.aux_index)
    params = _parameters(sender.send, "send")
    if "state_indices" in params:  # 0.5.3.post3 on
        stateful: tuple[Any, ...] = ([np.array(s, dtype=np.int32) for s in case.state],)
    elif case.state:
        raise ValueError(
            "kv_sender: this release's send(kv_indices) takes no state lists (state payloads came in 0.5.3.post3); "
            f"case.state={case.state} is outside its input domain"
        )
    else:
        stateful = ()
    counted = "num_kv_tokens" in params  # 0.5.17 on (#32837)
    told = "index_slice" in params  # to 0.4.6.post4: the caller passes each send's slice and last flag (#6019)
    at = 0
    for k, pages in enumerate(case.sends):
        tokens = {"num_kv_tokens": len(pages)} if counted else {}
        placed = (slice(at, at + len(pages)), k == len(case.sends) - 1) if told else ()
        sender.send(np.array(pages, dtype=np.int32), *placed, *stateful, **tokens)
        at += len(pages)
    return SenderTrace(manager.transfers)


def sglang_bootstrap(case: BootstrapCase, device: str) -> BootstrapTrace:  # pragma: no cover - conformance venv
    """Bootstrap finalisation for one request on the release's own code and its real sender (``pop_decode_prefix_len``
    where it has one, ``init``): ``PrefillBootstrapQueue.finalize_bootstrap`` (with ``ensure_metadata_buffer`` and
    ``_num_pages_to_send``) from 0.5.13; before, the same steps inline in ``pop_bootstrapped``, run over a queue
    holding the request once decode's destinations have arrived (``WaitingForInput``). Stand-ins: the metadata
    buffer pool (``_BufferPool``) and the poll's all-reduce over the attention TP/CP group (one rank: the identity)."""
    from sglang.srt.disaggregation import prefill
    from sglang.srt.disaggregation.base.conn import KVPoll

    from pdverify.properties.releases import FROM_MOONCAKE_DECODE_PREFIX

    release = release_with_prefix("bootstrap", case.decode_prefix)
    manager = _Manager(None, case.room, _prepare_state(_common_manager()))
    mooncake_carries = FROM_MOONCAKE_DECODE_PREFIX.not_applicable(release) is None
    nixl = prefix_sender_is_nixl(case.decode_prefix, release)
    sender = _common_sender(manager, case.room, nixl=nixl)
    # decode registers its prefix for the room where the backend's wire carries one; nothing registers it otherwise
    manager.req_to_decode_prefix_len = {case.room: case.decode_prefix} if nixl or mooncake_carries else {}
    buffers = _BufferPool(case.aux_index, busy_polls=0)
    buffers.poll()
    allocator = SimpleNamespace(page_size=case.page_size)
    fields: dict[str, Any] = dict(
        disagg_kv_sender=sender, pending_bootstrap=True, metadata_buffer_index=-1, start_send_idx=0,
        disagg_decode_prefix_len=0,
    )  # fmt: skip
    req: Any = release_request("r0", [0] * case.length, bootstrap_room=case.room, scheduled=fields)  # SGLang's own

    class Queue(prefill.PrefillBootstrapQueue):  # type: ignore[misc, unused-ignore]
        def __init__(self) -> None:
            self.scheduler = cast(
                Any,
                SimpleNamespace(
                    token_to_kv_pool_allocator=allocator, attn_cp_cpu_group=one_rank_gloo(),
                    attn_tp_cpu_group=one_rank_gloo(),
                    enable_metrics=False, enable_hicache_storage=False,
                ),
            )  # fmt: skip
            self.token_to_kv_pool = cast(Any, allocator)  # where 0.5.15 and earlier read the page size
            self.req_to_metadata_buffer_idx_allocator = buffers.allocator
            self.queue = [req]
            self.gloo_group, self.tp_rank = one_rank_gloo(), 0

    queue = Queue()
    if hasattr(queue, "finalize_bootstrap"):  # 0.5.13 on
        finalized = bool(queue.finalize_bootstrap(req))
    else:  # 0.5.12 and earlier: the steps inline in pop_bootstrapped, for a request decode is ready to receive
        manager.request_status[case.room] = KVPoll.WaitingForInput
        finalized = req in queue.pop_bootstrapped()
    return BootstrapTrace(
        finalized,
        int(req.start_send_idx),
        int(getattr(sender, "num_kv_indices", -1)),
        sender.aux_index,
        case.room in manager.req_to_decode_prefix_len,
    )
