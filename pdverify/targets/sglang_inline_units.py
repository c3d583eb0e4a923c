"""The function-level sender units on releases whose code has them inline: 0.4.5.post2 (#5561, paged transfer) to
0.5.20, before ``_send_kv_chunk`` and ``_transfer_page_indices`` were split out (0.5.21).

``send_kv_chunk``: one call of the release's own ``SchedulerDisaggregationPrefillMixin.send_kv_chunk`` with its real
KV sender (Mooncake's, through ``sglang_prefill._common_sender``), in the form the release has:

* 0.4.5.post2-0.4.6.post4: ``send_kv_chunk(req, token_id)``; the caller passes the sender each send's destination
  slice and last flag (``send(page_indices, index_slice, is_last)``, the last flag ``token_id is not None``): a token
  slice to 0.4.5.post3, a page slice from 0.4.6 (#5589);
* 0.4.6.post5 on: ``send_kv_chunk(req, last_chunk)``; the sender tracks its own offset and last flag (#6019).

The chunk's end is the request's fill length (``fill_ids``; ``extend_range.end`` from 0.5.15), capped at the prompt,
as the scheduler sets it before the call.

``decode_page_indices``: one pass of the release's own ``DecodePreallocQueue.pop_preallocated`` over a queue holding
the request, on a subclass whose ``__init__`` is skipped, recording the page list it hands the KV receiver
(``init`` to 0.5.9, ``send_metadata`` after). Stand-ins, none on the conversion under test: the handshake and the
admission budget (ample), ``_pre_alloc`` (the request gets the given row of the given table: the unit's input is
that table, not an allocation), the radix match (``_match_prefix_and_lock`` returns the given prefix: 0.5.11 on) and
the receiver (it records).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import torch

from pdverify.production.transfer import KvChunk, PrefillSendState
from pdverify.targets.sglang_decode import _prefix_match, _queue_base
from pdverify.targets.sglang_prefill import (
    _common_manager,
    _common_sender,
    _duck_scheduler,
    _extend_range,
    _Manager,
    _prepare_state,
    prefix_sender_is_nixl,
    release_with_prefix,
    send_chunk,
)
from pdverify.targets.sglang_request import kv_book, release_request

ROOM = 4242


def sglang_inline_send_kv_chunk(  # pragma: no cover - conformance venv
    req_to_token: torch.Tensor, state: PrefillSendState, *, extend_end: int, last_chunk: bool, page_size: int
) -> tuple[KvChunk | None, PrefillSendState]:
    """The function-level ``send_kv_chunk`` unit on a release's own ``send_kv_chunk`` (0.4.5.post2-0.5.20)."""
    from sglang.srt.disaggregation import prefill

    release = release_with_prefix("send_kv_chunk", state.decode_prefix_len)
    manager_class = _common_manager()
    manager = _Manager(None, ROOM, _prepare_state(manager_class) if manager_class is not None else None)
    sender = _common_sender(manager, ROOM, nixl=prefix_sender_is_nixl(state.decode_prefix_len, release))
    sender.init(state.num_pages, 0)
    tracks = hasattr(sender, "curr_idx")  # 0.4.6.post5 on: the sender places each send itself
    if tracks:
        sender.curr_idx = state.curr_idx
    sched = _duck_scheduler(
        prefill, req_to_token, page_size, translate=lambda t: t, staging=False, state_types=[], window=1,
        ring_size=1, set_buf=[],
    )  # fmt: skip
    scheduled: dict[str, Any] = dict(  # what the scheduler has set by the chunk's send
        fill_ids=[0] * extend_end, fill_len=extend_end,  # 0.5.13-0.5.14's name of the fill length
        extend_end=extend_end, extend_range=_extend_range(0, extend_end),  # 0.5.15-0.5.21's chunk (SGLang's Range)
        disagg_kv_sender=sender, metadata_buffer_index=0, start_send_idx=state.start_send_idx,
        disagg_decode_prefix_len=state.decode_prefix_len,
    )  # fmt: skip
    # SGLang's own Req, its row where the release keeps it
    req: Any = release_request("r0", [0] * state.origin_len, bootstrap_room=ROOM, req_pool_idx=state.req_pool_idx,
                               scheduled=scheduled)  # fmt: skip
    send_chunk(sched, req, last_chunk=last_chunk)
    sent = len(manager.raw)
    assert sent <= 1, f"one send_kv_chunk call made {sent} transfers"
    pages = manager.raw[0][0] if sent else None
    curr = sender.curr_idx if tracks else state.curr_idx + (len(pages) if pages is not None else 0)
    new_state = replace(state, start_send_idx=req.start_send_idx, curr_idx=curr)
    if pages is None:
        return None, new_state
    _, index_slice, is_last = manager.raw[0]
    return KvChunk(pages, index_slice.start, state.start_send_idx, req.start_send_idx, is_last), new_state


def sglang_inline_decode_page_indices(  # pragma: no cover - conformance venv
    req_to_token: torch.Tensor, req_pool_idx: int, decode_prefix_len: int, origin_input_len: int, page_size: int
) -> Any:
    """The function-level ``decode_page_indices`` unit on a release's own ``pop_preallocated`` (0.4.5.post2-0.5.20):
    the page list it hands the KV receiver for a request of ``origin_input_len`` tokens on row ``req_pool_idx``
    whose decode prefix is ``decode_prefix_len``."""
    from sglang.srt.disaggregation import decode

    release_with_prefix("decode_page_indices", decode_prefix_len)
    D, L = decode_prefix_len, origin_input_len
    radix = D > 0
    received: list[Any] = []

    class Receiver:
        require_staging = False

        def init(self, pages: Any, aux: Any, *rest: Any, **kw: Any) -> None:  # to 0.5.9
            received.append(pages)

        def send_metadata(self, pages: Any, aux: Any, *rest: Any, **kw: Any) -> None:  # 0.5.10 on
            received.append(pages)

        def clear(self) -> None:
            pass

    # SGLang's own Req (its KV bookkeeping, time stats and defaults), queued as the scheduler leaves it
    req: Any = release_request("r0", [0] * L, max_new_tokens=1, bootstrap_room=ROOM)
    table = req_to_token

    class Queue(_queue_base()):  # type: ignore[misc]
        def _update_handshake_waiters(self, *args: Any) -> None:  # the handshake is done (below)
            pass

        def _hicache_pending_restore_tokens(self, *args: Any, **kw: Any) -> int:
            return 0

        def _release_matched_prefix_lock(self, *args: Any, **kw: Any) -> None:
            pass

        def _pre_alloc(self, req: Any, *args: Any, **kw: Any) -> Any:  # the given row: the unit's input
            kv_book(req).req_pool_idx = req_pool_idx
            return table[req_pool_idx][D:L]

        def _match_prefix_and_lock(self, req: Any) -> Any:  # a device (L1) hit of D tokens, no host part
            return _prefix_match(table[req_pool_idx][:D], 0)

    server_args = SimpleNamespace(disaggregation_decode_enable_radix_cache=radix, page_size=page_size)
    queue: Any = Queue()
    # the handshake is done: the request waits for its destinations
    queue.queue = [decode.DecodeRequest(req=req, kv_receiver=cast(Any, Receiver()), waiting_for_input=True)]
    queue.req_to_token_pool = SimpleNamespace(req_to_token=table, available_size=lambda: 1)
    queue.req_to_metadata_buffer_idx_allocator = SimpleNamespace(available_size=lambda: 1, alloc=lambda: 0)
    queue.token_to_kv_pool = SimpleNamespace(page_size=page_size)
    queue.token_to_kv_pool_allocator = SimpleNamespace(
        page_size=page_size, translate_kv_indices_for_transfer=lambda t: t, get_kvcache=lambda: queue.token_to_kv_pool
    )
    queue.kv_manager = SimpleNamespace(kv_args=SimpleNamespace(state_types=[]))
    queue.scheduler = SimpleNamespace(
        running_batch=SimpleNamespace(reqs=[]), waiting_queue=[], last_batch=None, enable_priority_scheduling=False,
        enable_hisparse=False, enable_lora=False, enable_decode_hicache=False, sliding_window_size=None,
        server_args=server_args, tp_worker=SimpleNamespace(is_hybrid_swa=False),
        stream_output=lambda *a, **k: None,
    )  # fmt: skip
    disagg = SimpleNamespace(
        disaggregation_decode_enable_radix_cache=radix, disaggregation_decode_host_receive_threshold=0.0,
        disaggregation_decode_allocation_policy="early",
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        if hasattr(decode, "get_disagg"):  # 0.5.20: the flags are read from the disaggregation arguments
            stack.enter_context(mock.patch.object(decode, "get_disagg", lambda: disagg))
        result = queue.pop_preallocated()
    popped = result[0] if isinstance(result, tuple) else result
    assert len(popped) == 1 and len(received) == 1, (
        f"pop_preallocated admitted {len(popped)} request(s) and sent {len(received)} page list(s) for one request"
    )
    return received[0]
