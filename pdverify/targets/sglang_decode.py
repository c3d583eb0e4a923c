"""The decode pre-allocation unit on the installed SGLang: its own ``DecodePreallocQueue.pop_preallocated``,
driven on CPU for one request (sglang-real-paths.md section 4.2).

Runs, unmodified: ``pop_preallocated`` with its inline state payload closures, ``_pre_alloc``,
``_alloc_for_decode_prealloc`` / ``alloc_for_decode_prealloc`` on the real ``PagedTokenToKVPoolAllocator`` (CPU),
the real ``DecodeReqToTokenPool``, ``_required_alloc_tokens``, ``_required_admission_tokens``,
``_prealloc_reservation_fits``, ``_rebootstrap_prefill_len``, ``_pre_alloc_fill_len``, the HiCache mixin's
``_hicache_pending_restore_tokens`` and ``_start_hicache_prefetch``, ``_send_kv_metadata`` and
``_transfer_page_indices``. Overridden on a subclass whose ``__init__`` is skipped: the handshake
(``_resolve_pending_reqs``, ``_update_handshake_waiters``), the budget (``_allocatable_token_budgets``: ample)
and the radix match (``_match_prefix_and_lock`` returns the ``DecodePrefixMatch`` of the case: its L1 prefix
locations and an L2 host hit whose restore is pending). ``decode.get_disagg`` is patched for the call only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import torch

from pdverify.model.exchange import DecodeCase, DecodeTrace
from pdverify.targets.sglang_prefill import int_tuple


def sglang_decode_prealloc(case: DecodeCase, device: str) -> DecodeTrace:  # pragma: no cover - conformance venv
    from sglang.srt.disaggregation import decode
    from sglang.srt.disaggregation.base.conn import StateType
    from sglang.srt.disaggregation.decode_hicache_mixin import DecodePrefixMatch
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

    ps, radix = case.page_size, case.decode_prefix > 0
    pool_pages = max(case.free_pages) + 1
    kvcache = SimpleNamespace(
        page_size=ps, unified_swa_ring_size=case.ring_size, unified_swa_window=case.window, kpool_use_compress=False
    )
    allocator = PagedTokenToKVPoolAllocator(pool_pages * ps, ps, torch.int64, "cpu", kvcache=kvcache, need_sort=False)
    allocator.free_pages = torch.tensor(case.free_pages, dtype=torch.int64)
    allocator.release_pages = torch.empty((0,), dtype=torch.int64)
    allocator.translate_swa_indices_for_transfer = lambda t: t
    width = len(case.stale_row)
    req_pool = decode.DecodeReqToTokenPool(2, width, "cpu", False, 2)
    req_pool.req_to_token[:, :width] = torch.tensor(case.stale_row, dtype=torch.int32)
    sent: list[tuple[Any, ...]] = []

    class Receiver:
        supports_host_destination = False

        def send_metadata(self, pages: Any, aux: Any, state: Any, decode_prefix_len: Any = None, **kw: Any) -> None:
            sent.append((pages, aux, state, decode_prefix_len))

    l1 = torch.tensor(case.l1_row, dtype=torch.int64)

    class Queue(decode.DecodePreallocQueue):  # type: ignore[misc]
        def __init__(self) -> None:
            pass

        def _resolve_pending_reqs(self) -> None:
            pass

        def _update_handshake_waiters(self, *args: Any) -> None:
            pass

        def _allocatable_token_budgets(self, **kw: Any) -> int:
            return 10**9

        def _match_prefix_and_lock(self, req: Any) -> Any:
            return DecodePrefixMatch(
                prefix_indices=l1,
                l2_host_hit_length=case.decode_prefix - case.l1_prefix,
                l3_storage_hit_length=0,
                last_device_node=None,
            )

    q: Any = Queue()
    q.pp_size, q.pending_reqs, q.retracted_queue = 1, [], []
    q.num_reserved_decode_tokens, q._num_published_destinations = 0, 0
    q.scheduler = SimpleNamespace(
        running_batch=SimpleNamespace(reqs=[]),
        enable_priority_scheduling=False,
        enable_hisparse=False,
        enable_lora=False,
        enable_decode_hicache=radix,
        sliding_window_size=case.window,
        tp_worker=SimpleNamespace(is_hybrid_swa=False),
        last_batch=None,
    )
    q.req_to_metadata_buffer_idx_allocator = SimpleNamespace(available_size=lambda: 1, alloc=lambda: case.aux_index)
    q.req_to_token_pool = req_pool
    q.token_to_kv_pool_allocator = allocator
    q.token_to_kv_pool = kvcache
    q.draft_token_to_kv_pool = None
    q.kv_manager = SimpleNamespace(kv_args=SimpleNamespace(state_types=[StateType[k] for k in case.state_types]))
    q.transfer_queue = SimpleNamespace(enable_staging=False, queue=[])
    q.tree_cache = SimpleNamespace(maybe_hand_to_session=lambda r: None, supports_mamba=lambda: False)
    q.transfer_backend = None
    req = SimpleNamespace(
        rid="r0",
        bootstrap_room=1,
        finished_reason=None,
        kv=SimpleNamespace(
            holds_kv=False, req_pool_idx=None, kv_allocated_len=0, kv_committed_len=0, cache_protected_len=0,
            holds_mamba=False,
        ),
        origin_input_ids=[0] * case.length,
        output_ids=[0] * case.output_len,
        sampling_params=SimpleNamespace(max_new_tokens=8),
        time_stats=SimpleNamespace(set_decode_transfer_queue_entry_time=lambda: None),
        return_logprob=False,
        lora_id=None,
        priority=0,
        lock=None,
    )  # fmt: skip
    q.queue = [decode.DecodeRequest(req=req, kv_receiver=Receiver(), waiting_for_input=True)]
    disagg = SimpleNamespace(
        disaggregation_decode_host_receive_threshold=1.0,
        disaggregation_decode_enable_radix_cache=radix,
        disaggregation_decode_allocation_policy=None,
    )
    with mock.patch.object(decode, "get_disagg", lambda: disagg):
        done, failed = q.pop_preallocated()
    assert len(done) == 1 and not failed and len(sent) == 1, (
        f"pre-allocation did not admit the request: {done} {failed}"
    )
    pages, aux, state, prefix = sent[0]
    row = req_pool.req_to_token[req.kv.req_pool_idx]
    return DecodeTrace(
        pages=int_tuple(pages),
        dtype=str(np.asarray(pages).dtype),
        decode_prefix_len=prefix,
        aux_index=aux,
        state=tuple(int_tuple(s) for s in state),
        allocated=int_tuple(row[case.decode_prefix : case.fill_len]),
        row=int_tuple(row[: case.length]),
    )
