"""The decode pre-allocation units on the installed SGLang: its own ``DecodePreallocQueue.pop_preallocated``, driven on
CPU for one request (``decode_prealloc``) and for a queue of several (``decode_queue``).

Runs, unmodified: ``pop_preallocated`` with its inline state payload closures, ``_pre_alloc``,
``_alloc_for_decode_prealloc`` / ``alloc_for_decode_prealloc`` on the real ``PagedTokenToKVPoolAllocator`` (CPU),
the real ``DecodeReqToTokenPool``, ``_required_alloc_tokens``, ``_required_admission_tokens``,
``_prealloc_reservation_fits``, ``_rebootstrap_prefill_len``, ``_pre_alloc_fill_len``, the HiCache mixin's
``_hicache_pending_restore_tokens`` and ``_start_hicache_prefetch``, ``_send_kv_metadata`` and
``_transfer_page_indices``, and the handshake's ``_update_handshake_waiters`` with ``poll_and_all_reduce`` over a
one-rank gloo group (``sglang_group``; the receivers poll as the case says), over SGLang's own ``Req``
(``sglang_request.release_request``). Overridden on a subclass whose ``__init__`` is skipped: the prefill DP rank
resolution (``_resolve_pending_reqs``: nothing is pending), the budget
(``_allocatable_token_budgets``: ample for one request, the case's budget for a queue) and, for one request, the
radix match (``_match_prefix_and_lock`` returns the ``DecodePrefixMatch`` of the case: its L1 prefix locations and
an L2 host hit whose restore is pending). ``decode.get_disagg`` is patched for the call only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import numpy as np
import torch

from pdverify.model.exchange import DecodeCase, DecodeTrace
from pdverify.model.layout import token_locations
from pdverify.model.queue import RUNNING_MAX_NEW_TOKENS, Admission, DecodeQueueCase, QueueTrace, queue_trace
from pdverify.targets.protocol import ServerRefuses, TargetError
from pdverify.targets.sglang_context import published
from pdverify.targets.sglang_group import one_rank_gloo
from pdverify.targets.sglang_prefill import int_tuple, metadata_allocator
from pdverify.targets.sglang_request import kv_book, release_request


def _release_modules(*names: str) -> Iterator[Any]:
    """Each of the modules ``names`` (under ``sglang.srt.mem_cache``) the installed release has, in that order:
    modules moved and split across releases."""
    for name in names:
        try:
            yield importlib.import_module(f"sglang.srt.mem_cache.{name}")
        except ModuleNotFoundError:
            continue


def _paged_module() -> Any:
    """The module of SGLang's paged KV allocator: ``mem_cache/allocator/paged.py`` from 0.5.13,
    ``mem_cache/allocator.py`` from 0.4.8, ``mem_cache/paged_allocator.py`` before."""
    module = next(_release_modules("allocator.paged", "allocator", "paged_allocator"), None)
    if module is None:
        raise ImportError("no paged KV allocator module in sglang.srt.mem_cache")
    return module


def _release_class(name: str, *modules: str) -> Any:
    """SGLang's class ``name`` from the first of ``modules`` (under ``sglang.srt.mem_cache``) that the release has
    and that defines it: classes moved between modules across releases."""
    for module in _release_modules(*modules):
        found = getattr(module, name, None)
        if found is not None:
            return found
    raise ImportError(f"no {name} in sglang.srt.mem_cache.{{{', '.join(modules)}}}")


def _swa_allocator_class() -> Any:
    """SGLang's hybrid SWA allocator class: ``mem_cache/allocator/swa.py`` from 0.5.13, ``swa_memory_pool.py`` in
    0.5.8-0.5.12, ``allocator.py`` before."""
    return _release_class("SWATokenToKVPoolAllocator", "allocator.swa", "swa_memory_pool", "allocator")


def _state_lists_form() -> bool:
    """Whether the release sends one state list per registered state type (``StateType``, #24932, 0.5.12 on); before,
    one state payload chosen by the KV pool's type (``isinstance`` of ``SWAKVPool``, ``NSATokenToKVPool``, ...)."""
    try:
        conn = importlib.import_module("sglang.srt.disaggregation.base.conn")
    except ModuleNotFoundError:  # to 0.4.5 the placeholder KVReceiver lives in disaggregation/conn.py
        return False
    return hasattr(conn, "StateType")


def _allocator(free_pages: tuple[int, ...], page_size: int, kvcache: Any) -> Any:
    """SGLang's paged KV allocator on CPU, handing out ``free_pages`` in that order."""
    PagedTokenToKVPoolAllocator = _paged_module().PagedTokenToKVPoolAllocator
    if not hasattr(PagedTokenToKVPoolAllocator, "alloc"):  # to 0.4.4.post4: paged allocation is not wired up yet
        return _token_allocator(free_pages, page_size, kvcache)
    pool_pages = max(free_pages, default=0) + 1
    sort = {"need_sort": True} if "need_sort" in inspect.signature(PagedTokenToKVPoolAllocator).parameters else {}
    allocator: Any = PagedTokenToKVPoolAllocator(pool_pages * page_size, page_size, torch.int64, "cpu", kvcache=kvcache,
                                                 **sort)  # fmt: skip
    _hand_out(allocator, free_pages)
    # no SWA pool: the full-to-SWA translation is the identity (translate_loc_from_full_to_swa before 0.5.20)
    allocator.translate_swa_indices_for_transfer = allocator.translate_loc_from_full_to_swa = lambda t: t
    # SGLang's own checks of what it hands out (SGLANG_DEBUG_MEMORY_POOL): last_loc agrees with the prefix length
    # modulo the page size, fresh slots are distinct - stated contracts of the allocator, asserted by its own code
    allocator.debug_mode = True
    return allocator


def _token_allocator(free_pages: tuple[int, ...], page_size: int, kvcache: Any) -> Any:
    """SGLang's token-level KV allocator (``TokenToKVPoolAllocator``: the one decode allocates from before paged
    allocation, 0.4.4.post2-0.4.4.post4, and the one a server builds at page size 1), page size 1 only, handing out
    ``free_pages`` in that order; with ``need_sort`` as a PD server builds it where the release has the switch. Its
    free list is ``free_slots`` to 0.5.x, ``free_pages`` after."""
    TokenToKVPoolAllocator = _release_class("TokenToKVPoolAllocator", "allocator.token", "allocator", "memory_pool")
    if page_size != 1:
        raise ValueError(f"page_size={page_size}: this release allocates token slots only (page size 1)")
    sort = {"need_sort": True} if "need_sort" in inspect.signature(TokenToKVPoolAllocator).parameters else {}
    allocator: Any = TokenToKVPoolAllocator(max(free_pages, default=0) + 1, torch.int64, "cpu", kvcache, **sort)
    _hand_out(allocator, free_pages)
    return allocator


def _hand_out(allocator: Any, pages: tuple[int, ...]) -> None:
    """Make ``allocator`` hand out ``pages`` in that order (state injection): its free list (``free_slots`` to 0.5.x's
    token allocator, ``free_pages`` after) and an empty release list where it keeps one."""
    setattr(allocator, "free_pages" if hasattr(allocator, "free_pages") else "free_slots",
            torch.tensor(pages, dtype=torch.int64))  # fmt: skip
    if hasattr(allocator, "release_pages"):
        allocator.release_pages = torch.empty((0,), dtype=torch.int64)


class AllocExtendKernel:
    """A CPU stand-in for SGLang's Triton ``alloc_extend_kernel``, for releases whose paged allocator launches it
    unconditionally (0.5.21 and before; from 0.5.22 ``alloc_extend`` calls the torch-native ``alloc_extend_naive``
    off CUDA). ``kernel[(bs,)](...)`` runs the
    kernel's program for every ``pid`` in plain Python, part for part: the request's slots of ``[pre_len,
    seq_len)`` written at its offset in ``out_indices`` (the extend lengths of the requests before it) - first the
    rest of its old partial page (``last_loc + 1, ...``), then whole new pages, then a new partial page, the new
    pages read from ``free_pages`` after those the requests before it took. Where the kernel would read past
    ``free_pages`` (the allocator then returns None and discards the output) it writes 0."""

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        (bs,) = grid

        def launch(pre_lens: Any, seq_lens: Any, last_loc: Any, free_pages: Any, out: Any, *meta: Any) -> None:
            # the constants follow out_indices: to 0.5.1 (ret_values, bs_upper, page_size, max_num_extend_tokens) - the
            # kernel also returns (new pages << 32 | extend tokens) in ret_values -, then (bs_upper, page_size,
            # max_num_extend_tokens), later (bs_upper, page_size): the page size is the one after bs_upper
            ret = meta[0] if isinstance(meta[0], torch.Tensor) else None
            ps = int(meta[2] if ret is not None else meta[1])
            pre, seq, last = pre_lens.tolist(), seq_lens.tolist(), last_loc.tolist()
            free = free_pages.tolist()
            if ret is not None:
                new_pages = sum(-(-seq[k] // ps) - -(-pre[k] // ps) for k in range(bs))
                ret.fill_(new_pages << 32 | sum(seq[k] - pre[k] for k in range(bs)))

            def page(k: int) -> int:
                return int(free[k]) if 0 <= k < len(free) else 0

            def cdiv(a: int, b: int) -> int:
                return -(-a // b)

            for pid in range(bs):
                at = sum(seq[k] - pre[k] for k in range(pid))
                first_new = sum(cdiv(seq[k], ps) - cdiv(pre[k], ps) for k in range(pid))
                p, q = pre[pid], seq[pid]
                part1 = min(q, cdiv(p, ps) * ps) - p
                values = [last[pid] + 1 + j for j in range(part1)]
                if p + part1 < q:
                    part2 = q // ps * ps - cdiv(p, ps) * ps
                    values += [page(first_new + j // ps) * ps + j % ps for j in range(part2)]
                    if p + part1 + part2 < q:
                        start = page(first_new + cdiv(q, ps) - cdiv(p, ps) - 1)
                        values += [start * ps + j for j in range(q - q // ps * ps)]
                if values:
                    out[at : at + len(values)] = torch.tensor(values, dtype=out.dtype)

        return launch


def _cpu_alloc_extend() -> Any:
    """Patch SGLang's Triton ``alloc_extend_kernel`` with ``AllocExtendKernel`` wherever the release's allocator
    module has it: ``alloc_extend`` launches it on every device up to 0.5.21 (0.5.9-0.5.21 fall back to their own
    ``alloc_extend_naive`` only for an extend past Triton's tensor limit), and from 0.5.22 only where
    ``use_triton_kernels`` holds (off on CPU: it runs ``alloc_extend_naive`` and never reaches the patch)."""
    paged = _paged_module()
    if not hasattr(paged, "alloc_extend_kernel"):
        return contextlib.nullcontext()
    return mock.patch.object(paged, "alloc_extend_kernel", AllocExtendKernel())


def _queue_base() -> Any:
    """``DecodePreallocQueue`` with ``__init__`` skipped; the budget is ample unless a driver overrides it. The prefill
    DP rank resolution (``_resolve_pending_reqs``: HTTP queries to prefill's bootstrap server) is a no-op: the queue
    holds no pending request. The release's own ``_update_handshake_waiters`` polls the queued receivers and reduces
    the polls over a one-rank gloo group (``sglang_group.one_rank_gloo``)."""
    from sglang.srt.disaggregation import decode

    class Queue(decode.DecodePreallocQueue):  # type: ignore[misc, unused-ignore]
        def __init__(self) -> None:
            self.pp_size = 1
            self.pending_reqs: list[Any] = []
            self.retracted_queue: list[Any] = []
            self.num_reserved_decode_tokens, self._num_published_destinations = 0, 0
            self.draft_token_to_kv_pool = None
            self.transfer_queue = cast(Any, SimpleNamespace(enable_staging=False, queue=[]))
            self.tree_cache = cast(
                Any, SimpleNamespace(maybe_hand_to_session=lambda r: None, supports_mamba=lambda: False)
            )
            self.transfer_backend = cast(Any, None)
            self.gloo_group, self.tp_rank = one_rank_gloo(), 0

        def _resolve_pending_reqs(self) -> None:
            pass

        def _allocatable_token_budgets(self, *args: Any, **kw: Any) -> int:
            return 10**9

        def _allocatable_tokens(self, *args: Any, **kw: Any) -> int:
            """The budget's name to 0.5.11: whatever ``_allocatable_token_budgets`` a driver gives."""
            return int(self._allocatable_token_budgets(*args, **kw))

    return Queue


def _release_budget(cls: Any, queue: Any, *args: Any, **kw: Any) -> int:
    """The release's own full-side admission budget on ``queue``: ``_allocatable_token_budgets`` (0.5.12 on), else
    ``_allocatable_tokens`` (to 0.5.11)."""
    own = getattr(cls, "_allocatable_token_budgets", None) or cls._allocatable_tokens
    return int(own(queue, *args, **kw))


def _shifted(shift: list[int], real: int, first: int) -> int:
    """A real budget read less a constant, fixed at its first read (kept in ``shift``), that makes that read
    ``first``: the case's budget; the constant stands for what else the server holds back."""
    if not shift:
        shift.append(real - first)
    return int(real - shift[0])


def _scheduler(running: list[Any], **settings: Any) -> Any:
    """The scheduler fields ``pop_preallocated`` reads: features off unless ``settings`` turn them on."""
    fields: dict[str, Any] = {
        "running_batch": SimpleNamespace(reqs=running),
        "waiting_queue": [],
        "enable_priority_scheduling": False,
        "enable_hisparse": False,
        "enable_lora": False,
        "enable_decode_hicache": False,
        "sliding_window_size": None,
        "tp_worker": SimpleNamespace(is_hybrid_swa=False),
        "last_batch": None,
        # a failed handshake counts it when metrics are on (enable_metrics to 0.5.19, metrics_reporter after)
        "enable_metrics": False,
        "metrics_reporter": SimpleNamespace(enable_metrics=False, current_scheduler_metrics_enabled=False),
    }
    return SimpleNamespace(**{**fields, **settings})


def _request(  # pragma: no cover - conformance venv
    rid: str,
    length: int,
    output_len: int,
    *,
    lora: str | None = None,
    max_new_tokens: int = 8,
    prompt: list[int] | None = None,
) -> Any:
    """A request as the decode drivers hand it to ``pop_preallocated``: SGLang's own ``Req`` (``release_request``, in
    every release) with prompt tokens ``PROMPT_TOKEN + i`` (the radix tree's keys) unless ``prompt`` names them,
    ``output_len`` outputs, a bootstrap on a real prefill host (0.5.21 asks whether the transfer is the fake backend),
    the adapter; fresh KV bookkeeping and no abort, as the release's constructor leaves them."""
    if prompt is None:
        prompt = [PROMPT_TOKEN + i for i in range(length)]
    req = release_request(rid, prompt, max_new_tokens=max_new_tokens, lora_id=lora,
                          bootstrap_host="10.0.0.2", bootstrap_port=8998, bootstrap_room=1)  # fmt: skip
    req.output_ids.extend([0] * output_len)
    return req


def _host_threshold(threshold: float) -> float:
    """``--disaggregation-decode-host-receive-threshold`` as the installed release reads it: from 0.5.22 1 turns host
    receive off (the default); 0.5.21 turns it on with any value above 0 (``threshold > 0``), so off is 0 there."""
    import sglang
    from packaging.version import Version

    if threshold >= 1 and Version(sglang.__version__) < Version("0.5.22"):
        return 0.0
    return threshold


def _published(decode: Any, server_args: Any) -> contextlib.ExitStack:
    """The server's configuration for the call, as ``pop_preallocated`` reads it (``_disagg``'s leaves).

    Where the release publishes its configuration through a runtime context (``create_context``, 0.5.22 on): the
    context SGLang's own ``ServerArgs`` make for a decode scheduler (every leaf at the server's default), with the
    case's leaves set through the bags' own ``override`` - which refuses a leaf the release does not have. Before:
    ``decode.get_disagg`` and ``decode.get_memory`` patched to return ``server_args`` where the release reads its
    flags through them (``get_disagg`` from 0.5.17, ``get_memory`` from 0.5.19; earlier releases read
    ``scheduler.server_args``, which the drivers set too). See ``sglang_context``."""
    leaves = ("disaggregation_decode_host_receive_threshold", "disaggregation_decode_enable_radix_cache",
              "disaggregation_decode_allocation_policy")  # fmt: skip
    if hasattr(decode, "get_disagg"):
        own = published("decode", {"get_disagg": {k: getattr(server_args, k) for k in leaves},
                                   "get_memory": {"disable_radix_cache": server_args.disable_radix_cache}})  # fmt: skip
        if own is not None:
            return own
    stack = contextlib.ExitStack()
    for getter in ("get_disagg", "get_memory"):
        if hasattr(decode, getter):
            stack.enter_context(mock.patch.object(decode, getter, lambda: server_args))
    return stack


def _disagg(*, radix: bool) -> Any:
    """The server arguments ``pop_preallocated`` reads: the disaggregation flags (``decode.get_disagg``) and the radix
    cache switch (``decode.get_memory``), or both from ``scheduler.server_args`` in older releases."""
    return SimpleNamespace(
        disaggregation_decode_host_receive_threshold=1.0,
        disaggregation_decode_enable_radix_cache=radix,
        disaggregation_decode_allocation_policy="early",  # the server default
        disable_radix_cache=not radix,  # 0.5.18 reads it from server_args (get_memory() from 0.5.19)
    )


class _RequestStatePool:  # pragma: no cover - conformance venv
    """SGLang's own DeepSeek-V4 request-state code on a real ``CompressStatePool`` of the case's layout: the KV pool
    stand-in gets the pool class's own methods bound to it - ``request_state_transfer_indices`` and
    ``clear_request_scoped_state`` (0.5.21 on), or ``clear_c128_req_state`` and ``get_ring_size``, which 0.5.20's
    decode reads beside its ``get_dsv4_c128_state_indices`` - (the pool's class stays a stand-in: a real one builds
    every layer's buffers, and its type would turn on DeepSeek-V4's SWA-tail allocation, another unit). Every row's
    ring starts as an earlier request left it (``STALE``); ``reset_rows`` names the rows whose whole ring no longer
    holds it. With the state type off, no pool and no methods: SGLang's ``getattr(..., None)`` finds none."""

    STALE = 7.0
    METHODS = ("request_state_transfer_indices", "clear_request_scoped_state", "clear_c128_req_state", "get_ring_size")

    def __init__(self, case: DecodeCase, kvcache: Any, rows: int) -> None:
        self.buffer: torch.Tensor | None = None
        self.online = False
        if "DSV4_REQUEST_STATE" not in case.state_types:
            return
        from sglang.srt.mem_cache import deepseek_v4_memory_pool as dsv4
        from sglang.srt.mem_cache.deepseek_v4_compress_state import CompressStatePool

        ratio, self.online, self.ring = case.request_state
        scoped = {"request_scoped": True} if "request_scoped" in inspect.signature(CompressStatePool).parameters else {}
        pool = CompressStatePool(
            size=rows * self.ring, ring_size=self.ring, overlap=False, head_dim=2, dtype=torch.float32, device="cpu",
            enable_memory_saver=False, ratio=ratio, online=self.online, **scoped,
        )  # fmt: skip
        self.buffer = pool.kv_score_buffer.kv_score
        self.buffer.fill_(self.STALE)
        self.rows = rows
        kvcache.compress_state_pools = [None, pool]  # a layer without compression, then the request-scoped one
        for name in self.METHODS:
            if hasattr(dsv4.DeepSeekV4TokenToKVPool, name):
                setattr(kvcache, name, types.MethodType(getattr(dsv4.DeepSeekV4TokenToKVPool, name), kvcache))

    def online_flag(self) -> Any:
        """SGLang builds an online C128 pool only under ``SGLANG_OPT_USE_ONLINE_COMPRESS`` (read by the reset as the
        module flag ``ONLINE_C128``, by 0.5.20's decode through ``is_dsv4_c128_online_enabled``), and the 256-token
        ring only with speculative decoding (``get_spec``): both as the layout has them."""
        stack = contextlib.ExitStack()
        if self.buffer is None:
            return stack
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache import deepseek_v4_memory_pool as dsv4

        stack.enter_context(mock.patch.object(dsv4, "ONLINE_C128", self.online))
        stack.enter_context(envs.SGLANG_OPT_USE_ONLINE_COMPRESS.override(self.online))
        speculative = SimpleNamespace(speculative_algorithm="EAGLE" if self.ring == 256 else None)
        # the speculative setting as the release's get_ring_size reads it: get_spec() (0.5.17 on; 0.5.17 also reads
        # the global server args first, unused), the global server args (0.5.16), the pool's server args (0.5.15)
        for getter in ("get_spec", "get_server_args", "get_global_server_args"):
            if hasattr(dsv4, getter):
                stack.enter_context(mock.patch.object(dsv4, getter, lambda: speculative))
        return stack

    def reset_rows(self) -> tuple[int, ...]:
        if self.buffer is None:
            return ()
        left = self.buffer[: self.rows * self.ring] == self.STALE
        return tuple(r for r in range(self.rows) if not left[r * self.ring : (r + 1) * self.ring].any())


def sglang_decode_prealloc(case: DecodeCase, device: str) -> DecodeTrace:  # pragma: no cover - conformance venv
    from sglang.srt.disaggregation import decode

    ps, radix = case.page_size, case.decode_prefix > 0
    lists = _state_lists_form()
    kvcache: Any = SimpleNamespace()
    if not lists and "DSA" in case.state_types:  # the payload follows the pool's type: DeepSeek's sparse-attention pool
        nsa = _release_class("NSATokenToKVPool", "memory_pool")
        kvcache = nsa.__new__(nsa)
    if case.swa_free_pages is None:
        allocator = _allocator(case.free_pages, ps, kvcache)
    else:
        kvcache, allocator = _swa_pool(case)
    for name, value in (("page_size", ps), ("unified_swa_ring_size", case.ring_size),
                        ("unified_swa_window", case.window), ("kpool_use_compress", False)):  # fmt: skip
        setattr(kvcache, name, value)
    width = len(case.stale_row)
    req_pool = _request_rows(decode, width)
    request_state = _RequestStatePool(case, kvcache, rows=req_pool.req_to_token.shape[0])
    req_pool.req_to_token[:, :width] = torch.tensor(case.stale_row, dtype=torch.int32)
    sent: list[tuple[Any, ...]] = []

    class Receiver:
        supports_host_destination = False
        conclude_state = None

        def poll(self) -> int:
            """Ready: the request waits for its destinations (``waiting_for_input``)."""
            return int(decode.KVPoll.WaitingForInput)

        def send_metadata(self, pages: Any, aux: Any, state: Any, decode_prefix_len: Any = None, **kw: Any) -> None:
            if not lists:  # one payload, the pool's (or None), before the state lists: as a list per state type
                state = [] if state is None else [state]
            sent.append((pages, aux, state, decode_prefix_len, request_state.reset_rows()))

        def init(self, pages: Any, aux: Any, state: Any = None) -> None:  # the same hand-over's name to 0.5.9
            self.send_metadata(pages, aux, state)

    l1 = torch.tensor(case.l1_row, dtype=torch.int64)

    real_tree = _real_tree_answers(decode, case)

    class Queue(_queue_base()):  # type: ignore[misc]
        def _match_prefix_and_lock(self, req: Any) -> Any:
            if real_tree:  # the release's own match, on SGLang's tree
                return decode.DecodePreallocQueue._match_prefix_and_lock(self, req)
            return _prefix_match(l1, case.decode_prefix - case.l1_prefix)

        def _swa_aware_allocatable_token_budgets(self, **kw: Any) -> tuple[int, int]:
            return 10**9, 10**9

        def _swa_tail_allocatable_token_budget(self, **kw: Any) -> int:
            return 10**9

    q: Any = Queue()
    q.scheduler = _scheduler(
        [],
        enable_decode_hicache=radix,
        sliding_window_size=case.window,
        tp_worker=SimpleNamespace(is_hybrid_swa=case.swa_free_pages is not None),
    )
    evicted: list[int] = []
    leaves = [list(leaf) for leaf in case.cached_leaves]
    if real_tree:
        q.tree_cache = _real_tree(case, req_pool, allocator, evicted)
    else:
        q.tree_cache.release_swa = lambda lock: None

        def evict_for_alloc(params: Any) -> Any:
            """The radix cache's eviction (a stand-in): its least recently used leaves, each whole, until they cover
            the tokens asked for, freed to the allocator."""
            pages: list[int] = []
            while len(pages) * ps < params.num_tokens and leaves:
                pages += leaves.pop(0)
            count = len(pages)
            evicted.extend(pages)
            if pages:
                allocator.free(torch.tensor([p * ps + o for p in pages for o in range(ps)], dtype=torch.int64))
            return SimpleNamespace(num_tokens_evicted=count * ps)

        q.tree_cache.evict_for_alloc = q.tree_cache.evict = evict_for_alloc  # evict: 0.5.18's name
        q.tree_cache.evictable_size = lambda: sum(map(len, leaves)) * ps
        q.tree_cache.protected_size = lambda: 0
    # the one buffer left is the case's, whatever the buffers before it hold
    q.req_to_metadata_buffer_idx_allocator = metadata_allocator(case.aux_index, free=True)
    q.req_to_token_pool = req_pool
    q.token_to_kv_pool_allocator = allocator
    q.token_to_kv_pool = kvcache
    state_types = [_state_type(k) for k in case.state_types] if lists else []  # before the lists: the pool's type
    q.kv_manager = SimpleNamespace(kv_args=SimpleNamespace(state_types=state_types))
    req = _request("r0", case.length, case.output_len)
    for name, value in case.extra.items():  # registered request fields
        setattr(req, name, value)
    q.queue = [decode.DecodeRequest(req=req, kv_receiver=cast(Any, Receiver()), waiting_for_input=True)]
    q.scheduler.server_args = _disagg(radix=radix)  # 0.5.19 and earlier read the flags there
    # the SWA span is the release's decision (tail pre-allocation or the whole sequence): the case must describe it
    uses_tail = bool(getattr(q, "_uses_swa_tail_prealloc", lambda: False)())
    if case.swa_free_pages is not None and uses_tail != case.swa_tail:
        raise ValueError(
            f"swa_tail={case.swa_tail}: at page size {ps} this release's decode "
            f"{'pre-allocates only the SWA tail' if uses_tail else 'allocates the whole sequence in the SWA buffer'}"
            " (DecodePreallocQueue._uses_swa_tail_prealloc): not a configuration its server makes"
        )
    with (
        _published(decode, q.scheduler.server_args),
        request_state.online_flag(),
        _cpu_alloc_extend(),
    ):
        result = q.pop_preallocated()
    done, failed = result if isinstance(result, tuple) else (result, [])  # no failed list to 0.5.3.post3
    assert len(done) == 1 and not failed and len(sent) == 1, (
        f"pre-allocation did not admit the request: {done} {failed}"
    )
    pages, aux, state, prefix, cleared_before = sent[0]
    book = kv_book(req)
    row = req_pool.req_to_token[book.req_pool_idx]
    tail = row[case.fill_len - case.swa_tail_len : case.fill_len].to(torch.int64)
    return DecodeTrace(
        pages=int_tuple(pages),
        dtype=str(np.asarray(pages).dtype),
        decode_prefix_len=prefix,
        aux_index=aux,
        state=tuple(int_tuple(s) for s in state),
        # what decode allocated starts where the prefix it announced ends (a decode that declines its host hit
        # announces less than the case's D and allocates from there)
        allocated=int_tuple(row[_announced(prefix, case) : case.fill_len]),
        # what the SWA buffer holds for the span, read from the allocator's own map (not through the translation
        # decode's SWA lists are built with: D1 checks that translation against it)
        swa_allocated=int_tuple(allocator.full_to_swa_index_mapping[tail]) if case.swa_free_pages else (),
        swa_start=case.fill_len - case.swa_tail_len if case.swa_free_pages else 0,
        req_pool_idx=int(book.req_pool_idx),
        evicted=tuple(evicted),
        cleared_rows=cleared_before,
        row=int_tuple(row[: case.length]),
        cache_protected_len=_protected_len(book),
    )


def _protected_len(book: Any) -> int | None:
    """The prefix the request's tree match covers, as the release records it: ``cache_protected_len`` (0.5.6 on),
    ``last_matched_prefix_len`` under its name before #13714 (0.5.3-0.5.5.post3); None where the request records
    neither (before 0.5.3, #10846)."""
    for name in ("cache_protected_len", "last_matched_prefix_len"):
        if (owned := getattr(book, name, None)) is not None:
            return int(owned)
    return None


PROMPT_TOKEN = 1000
"""The first token id of a pre-allocation case's prompt (token ``i`` is ``PROMPT_TOKEN + i``: the tree matches the
request's prefix by them)."""
CACHED_TOKEN = 500_000
"""The first token id of the other sequences the decode radix cache holds (one per cached leaf)."""


def _real_tree_answers(decode: Any, case: DecodeCase) -> bool:  # pragma: no cover - conformance venv
    """Whether SGLang's own decode radix cache answers a pre-allocation case (``_real_tree``): the release matches
    through ``match_kv_cache`` and locks through ``tree_cache.lock`` (0.5.22 on), one full pool, the prefix all on the
    device (a HiCache host hit needs the host pool's CUDA copies, which do not run here). Elsewhere the stand-in tree
    answers."""
    return (
        hasattr(decode, "match_kv_cache")
        and case.decode_prefix > 0
        and case.decode_prefix == case.l1_prefix
        and case.swa_free_pages is None
    )


def _real_tree(case: DecodeCase, req_pool: Any, allocator: Any, evicted: list[int]) -> Any:  # pragma: no cover
    """SGLang's own ``UnifiedRadixCache`` (full component) over the case's request pool and allocator: the request's L1
    prefix inserted at ``l1_row``, then each cached sequence (``cached_leaves``) as a leaf of its own, in the case's
    eviction order (least recently used first). ``evicted`` collects the pages its ``evict_for_alloc`` frees, in the
    order freed."""
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    ps = case.page_size
    tree = UnifiedRadixCache(CacheInitParams(disable=False, req_to_token_pool=req_pool,
                                             token_to_kv_pool_allocator=allocator, page_size=ps,
                                             tree_components=(ComponentType.FULL,)))  # fmt: skip

    def insert(tokens: list[int], slots: list[int]) -> None:
        key = RadixKey(token_ids=array("q", tokens), extra_key=None)
        tree.insert(InsertParams(key=key, value=torch.tensor(slots, dtype=torch.int64)))

    insert([PROMPT_TOKEN + i for i in range(case.l1_prefix)], list(case.l1_row))
    for k, leaf in enumerate(case.cached_leaves):  # each a sequence of its own: one leaf under the root
        tokens = [CACHED_TOKEN + k * 4096 + j for j in range(len(leaf) * ps)]
        insert(tokens, [page * ps + o for page in leaf for o in range(ps)])
    own_evict = tree.evict_for_alloc

    def free_pages() -> list[int]:
        """The allocator's free pages: its free list, then the pages freed since its last merge (a PD server's
        allocator sorts them in only when an allocation runs short - ``need_sort``: ``release_pages`` to 0.5.22, a
        list of ``staged_pages`` from 0.5.23)."""
        found = [getattr(allocator, name, None) for name in ("free_pages", "release_pages")]
        lists = [pages for pages in found if pages is not None] + list(getattr(allocator, "staged_pages", None) or [])
        return [int(p) for pages in lists for p in pages.tolist()]

    def evict_for_alloc(params: Any) -> Any:
        before = set(free_pages())
        result = own_evict(params)
        evicted.extend(p for p in free_pages() if p not in before)  # in the order the tree freed them
        return result

    tree.evict_for_alloc = evict_for_alloc
    return tree


PAGE_TOKEN = 2_000_000
"""The first token id of a queued request's cached prefix: token ``PAGE_TOKEN + page * page_size + offset`` at each
slot of its prefix pages, so that requests whose prefixes hold the same pages share their tokens (and the tree's
nodes), and a request's match ends where its prefix pages do (its later tokens are ``PROMPT_TOKEN + i``, which no
cached sequence holds)."""


def _page_tokens(pages: tuple[int, ...], ps: int) -> list[int]:
    """The tokens of cached prefix ``pages``: ``PAGE_TOKEN`` plus each of their slots."""
    return [PAGE_TOKEN + slot for slot in token_locations(list(pages), len(pages) * ps, ps)]


def _queue_prompts(case: DecodeQueueCase) -> list[list[int]]:
    """Each queued request's prompt: its prefix pages' tokens (``_page_tokens``), then ``PROMPT_TOKEN + i``."""
    ps = case.page_size
    prompts = []
    for r in case.requests:
        cached = _page_tokens(r.prefix_pages, ps)[: r.length]
        prompts.append(cached + [PROMPT_TOKEN + i for i in range(len(cached), r.length)])
    return prompts


def _queue_tree_answers(decode: Any, case: DecodeQueueCase) -> bool:
    """Whether SGLang's own decode radix cache answers a queue case (``_queue_tree``): the release matches through
    ``match_kv_cache`` and locks through ``tree_cache.lock`` (0.5.22 on), one full pool (a hybrid SWA tree's SWA
    component is still the lock book's), and the prefixes of each adapter's requests one chain - each the start of
    the longest - with no page under two adapters, as the strategy draws them (the tree keys a prefix by the adapter
    too; two branches would share a first page the tree holds once, and building them its insert frees the second
    copy). Elsewhere the lock book answers."""
    chains = _prefix_chains(case)
    pages = [page for chain in chains.values() for page in chain]
    forms_chains = all(r.prefix_pages == chains.get(r.lora, ())[: len(r.prefix_pages)] for r in case.requests) and len(
        pages
    ) == len(set(pages))
    return case.radix and hasattr(decode, "match_kv_cache") and case.swa_free_pages is None and forms_chains


def _prefix_chains(case: DecodeQueueCase) -> dict[str | None, tuple[int, ...]]:
    """Each adapter's longest prefix among the queued requests (the chain the decode radix cache holds for it)."""
    chains: dict[str | None, tuple[int, ...]] = {}
    for r in case.requests:
        if len(r.prefix_pages) > len(chains.get(r.lora, ())):
            chains[r.lora] = r.prefix_pages
    return chains


def _queue_tree(  # pragma: no cover - conformance venv
    case: DecodeQueueCase, req_pool: Any, allocator: Any, extra_keys: dict[str | None, Any]
) -> Any:
    """SGLang's own ``UnifiedRadixCache`` (full component) over the queue's request pool and allocator, caching each
    adapter's prefix chain (``_prefix_chains``) under its prefix tokens (``_queue_prompts``) and the adapter's extra
    key (``extra_keys``: each adapter's requests' ``Req.extra_key``): requests whose prefixes hold the same pages share
    the tree's nodes. Its eviction must not run: the case's free pages cover every admission, so a call to
    ``evict_for_alloc`` that frees anything is a driver error, not a pass."""
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    ps = case.page_size
    tree = UnifiedRadixCache(CacheInitParams(disable=False, req_to_token_pool=req_pool,
                                             token_to_kv_pool_allocator=allocator, page_size=ps,
                                             tree_components=(ComponentType.FULL,)))  # fmt: skip
    # each chain once, the longest prefix's (the others are its start: inserting them too would free their copies)
    for lora, pages in _prefix_chains(case).items():
        slots = token_locations(list(pages), len(pages) * ps, ps)
        tokens = _page_tokens(pages, ps)
        key = RadixKey(token_ids=array("q", tokens), extra_key=extra_keys[lora])
        tree.insert(InsertParams(key=key, value=torch.tensor(slots, dtype=torch.int64)))
    own_evict = tree.evict_for_alloc

    def evict_for_alloc(params: Any) -> Any:
        result = own_evict(params)
        if result.num_tokens_evicted:
            raise TargetError(
                f"the queue's radix cache evicted {result.num_tokens_evicted} tokens: the case's free pages "
                f"{list(case.free_pages)} do not cover its admissions (the strategy sizes them to)"
            )
        return result

    tree.evict_for_alloc = evict_for_alloc
    return tree


def _request_rows(decode: Any, width: int, rows: int = 2, pre_alloc: int = 2) -> Any:
    """Decode's request-to-token pool of ``rows`` free rows and ``pre_alloc`` pre-allocation rows of ``width`` slots:
    ``DecodeReqToTokenPool`` from 0.4.7 (#6980), the plain ``ReqToTokenPool`` decode used before (all its rows free)."""
    if hasattr(decode, "DecodeReqToTokenPool"):
        return decode.DecodeReqToTokenPool(rows, width, "cpu", False, pre_alloc)
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    return ReqToTokenPool(rows + pre_alloc, width, "cpu", False)


STATE_TYPE_NAMES = {"DSV4_REQUEST_STATE": "C128_STATE", "DSA": "NSA"}
"""A state type's name in releases before its rename (0.5.20 renamed C128_STATE DSV4_REQUEST_STATE; 0.5.13 renamed
NSA DSA)."""


def _state_type(name: str) -> Any:
    """SGLang's ``StateType`` member ``name``, under its earlier name in a release before the rename."""
    from sglang.srt.disaggregation.base.conn import StateType

    return getattr(StateType, name, None) or StateType[STATE_TYPE_NAMES.get(name, name)]


def _prefix_match(device: torch.Tensor, host_hit: int) -> Any:
    """What the release's ``_match_prefix_and_lock`` returns for a device (L1) hit ``device`` and a HiCache host hit of
    ``host_hit`` tokens: a ``DecodePrefixMatch`` from 0.5.13 (#26227, decode HiCache), ``(prefix indices, prefix
    length)`` before (0.5.11-0.5.12: no host hit, ``DOMAIN.has("decode_hicache")``)."""
    try:
        from sglang.srt.disaggregation.decode_hicache_mixin import DecodePrefixMatch
    except ImportError:
        assert host_hit == 0, f"a host hit of {host_hit} tokens on a release without decode HiCache"
        return device, len(device)
    return DecodePrefixMatch(
        prefix_indices=device, l2_host_hit_length=host_hit, l3_storage_hit_length=0, last_device_node=None
    )


def _announced(prefix: Any, case: DecodeCase) -> int:
    """The prefix decode sent prefill, where it lies in ``[L1, D]`` (else the case's D: D1 names the bad value)."""
    return (
        int(prefix)
        if isinstance(prefix, int) and case.l1_prefix <= prefix <= case.decode_prefix
        else case.decode_prefix
    )


def _swa_pool(case: DecodeCase) -> tuple[Any, Any]:  # pragma: no cover - conformance venv
    assert case.swa_free_pages is not None
    return _hybrid_swa_pool(case.free_pages, case.swa_free_pages, case.page_size)


def _hybrid_swa_pool(
    free_pages: tuple[int, ...], swa_free_pages: tuple[int, ...], ps: int
) -> tuple[Any, Any]:  # pragma: no cover - conformance venv
    """SGLang's hybrid SWA allocator (``SWATokenToKVPoolAllocator``: a full and an SWA paged allocator and the
    full-to-SWA index mapping) over a ``SWAKVPool`` without its buffers (``__init__`` skipped: the allocator and
    the decode queue read only its type, the mapping it registers and the page geometry)."""
    SWAKVPool = _release_class("SWAKVPool", "swa_memory_pool", "memory_pool")
    SWATokenToKVPoolAllocator = _swa_allocator_class()

    kvcache: Any = SWAKVPool.__new__(SWAKVPool)
    kvcache.page_size, kvcache.full_kv_pool, kvcache.swa_kv_pool = ps, None, None
    kvcache.swa_req_ring_size, kvcache.full_to_swa_index_mapping = None, None
    full_pages, swa_pages = max(free_pages, default=0) + 1, max(swa_free_pages, default=0) + 1
    # the page size is the allocator's from #16296 (0.5.8); before, it is token-granular and takes none
    paged = (ps,) if "page_size" in inspect.signature(SWATokenToKVPoolAllocator).parameters else ()
    if not paged and ps != 1:
        raise ValueError(f"page_size={ps}: this release's hybrid SWA allocator is token-granular (page size 1)")
    allocator = SWATokenToKVPoolAllocator(full_pages * ps, swa_pages * ps, *paged, torch.int64, "cpu",
                                          kvcache=kvcache, need_sort=True)  # fmt: skip
    _hand_out(allocator.full_attn_allocator, free_pages)
    _hand_out(allocator.swa_attn_allocator, swa_free_pages)
    return kvcache, allocator


def _staging(ps: int, events: list[tuple[str, int]]) -> Any:  # pragma: no cover - conformance venv
    """SGLang's own ``DecodeStagingHandler``, its registration recorded: ``("staging", i)``, or ``("staging failed",
    i)`` when the real ``register_decode_req`` failed the room (a decode prefix that is not page-aligned: "Scatter
    offsets shift suffix-relative page_start by the decode prefix, exact only when the prefix is page-aligned").
    Only the KV buffers' device is a stand-in: an indexed CPU device (the constructor asserts an indexed device,
    CUDA's case, and reads nothing else of the buffers)."""
    from sglang.srt.disaggregation.common.staging_handler import DecodeStagingHandler

    base: Any = DecodeStagingHandler  # typed or not by the environment's mypy: Any in both

    class Recorded(base):  # type: ignore[misc]
        def register_decode_req(self, room: int, decode_req: Any) -> None:
            super().register_decode_req(room, decode_req)
            failed = getattr(decode_req, "_staging_failed", False)  # 0.5.17 and earlier fail no room at registration
            events.append(("staging failed" if failed else "staging", int(decode_req.req.rid[1:])))

    buffers = {"page_size": ps, "k_buffers": [SimpleNamespace(device=torch.device("cpu", 0))]}
    return Recorded(None, None, buffers, decode_tp=1, total_kv_heads=1, tp_rank=0, scheduler=None)


def _lora_manager() -> Any:  # pragma: no cover - conformance venv
    """SGLang's ``LoRAManager``, its module imported after the quantization package as the server does: imported first,
    0.5.5-0.5.6.post2's ``layers.linear`` and ``layers.quantization`` import each other half-initialised."""
    importlib.import_module("sglang.srt.layers.quantization")
    return importlib.import_module("sglang.srt.lora.lora_manager").LoRAManager


@functools.cache
def host_destination_refusal() -> str | None:  # pragma: no cover - conformance venv
    """Why the release's decode server refuses to receive KV into host memory (``--disaggregation-decode-host-receive-
    threshold`` below 1; above 0 on 0.5.21, which reads it the other way), or None where it accepts it:
    ``DecodePreallocQueue._init_kv_manager`` raises "Transfer backend does not support decode host KV destinations"
    unless the transfer backend's KV manager sets ``supports_host_destination``. Each backend of
    ``TransferBackend`` is asked (its manager class, as ``get_kv_class`` gives it; a backend whose module needs a
    library not installed here, by whether its source sets the flag at all). A fact of the release: asked once per
    process."""
    import pathlib

    from sglang.srt.disaggregation import utils

    asked = []
    for backend in utils.TransferBackend:
        try:
            manager = utils.get_kv_class(backend, utils.KVClassType.MANAGER)
        except ImportError:
            source = pathlib.Path(utils.__file__).parent / backend.value / "conn.py"
            if not source.exists() or "supports_host_destination" in source.read_text():
                return None  # cannot be told here: taken as accepting
            asked.append(backend.value)
            continue
        if manager is None or getattr(manager, "supports_host_destination", False):
            return None
        asked.append(backend.value)
    return (
        "decode host receive on (--disaggregation-decode-host-receive-threshold below 1; above 0 on 0.5.21): decode's "
        "_init_kv_manager raises 'Transfer backend does not support decode host KV destinations' for every transfer "
        f"backend of the release ({', '.join(asked)})"
    )


def _pp_prealloc_step(queue: Any, good: list[str], bad: list[str]) -> tuple[list[Any], list[Any]]:
    """A PP decode stage's pre-allocation step: the release's own ``SchedulerPPMixin.process_prealloc_queue`` (the
    decode PP event loop's, 0.5.7 on) on a scheduler holding ``queue``, given the stages' consensus - the lists its
    loop computed, ready on every stage (``good``) and failed on some stage (``bad``). It hands the pass the
    consensus: as ``pp_good_rids`` / ``pp_bad_rids`` from 0.5.17 (#31869), as ``rids_to_check = good + bad`` before.
    Returns the admitted requests (what the step moved to the transfer queue) and the failed ones (by rid, as the
    step returns them, in its order), the pass's own result form."""
    from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin

    moved: list[Any] = []
    # the scheduler is a stand-in (a SimpleNamespace where ``Scheduler`` is annotated); the consensus is two lists,
    # as the PP loop passes it (``_pp_pd_get_prealloc_ids``) and the method unpacks it, where SGLang annotates
    # ``prealloc_rids: Optional[List[str]]`` (A3 in docs/release-matrix.md)
    stage = cast(Any, SimpleNamespace(disagg_decode_prealloc_queue=queue, disagg_decode_transfer_queue=moved))
    result = SchedulerPPMixin.process_prealloc_queue(stage, cast(Any, [good, bad]))
    if result is None or [d.req.rid for d in moved] != list(result[0]):
        raise AssertionError(f"process_prealloc_queue returned {result!r}, moved {[d.req.rid for d in moved]}")
    return moved, [SimpleNamespace(req=SimpleNamespace(rid=rid)) for rid in result[1]]


def sglang_decode_queue(case: DecodeQueueCase, device: str) -> QueueTrace:  # pragma: no cover - conformance venv
    """One ``pop_preallocated`` pass over the case's queue, the decode radix cache off or on.

    Real: ``pop_preallocated`` (priority sort, abort scan, admission loop), ``_pre_alloc``, the paged allocator,
    ``DecodeReqToTokenPool`` with ``request_rows`` free rows, ``ReqToMetadataIdxAllocator`` with
    ``metadata_buffers``, ``FINISH_ABORT``, ``_required_admission_tokens`` and ``_prealloc_reservation_fits``,
    the LoRA gate - ``Scheduler.can_schedule_lora_req`` (0.5.20 on) over the duck scheduler and the LoRA manager's
    own ``validate_lora_batch``, bound to a manager of the case's ``max_loras_per_batch`` - the staging handler's
    ``register_decode_req`` (``_staging``), a PP stage's step (``SchedulerPPMixin.process_prealloc_queue`` given the
    case's consensus, a stage of ``pp_size`` 2, 0.5.7 on; ``poll_and_all_reduce_pp`` from 0.5.17), and the full-side
    budget (``_allocatable_token_budgets``,
    ``_allocatable_tokens`` to 0.5.11: the release's own, over the real allocator and the running batch, shifted by a
    constant to start at the case's budget - ``_release_budget``), and likewise the SWA budget
    (``_swa_tail_allocatable_token_budget``, 0.5.12 on); the decode radix cache SGLang's own ``UnifiedRadixCache``
    holding the queued requests' prefixes, which the release's own ``_match_prefix_and_lock`` matches and locks, where
    ``_queue_tree_answers`` (0.5.22 on, a full pool, one prefix chain per adapter). Stand-ins: the SWA budget of a case
    that leaves it to the radix cache's evictable SWA pages (``swa_token_budget`` None: ample); elsewhere, the radix
    match (``_match_prefix_and_lock``: the request's prefix pages, locked in a lock book whose ``unlock`` the real code
    calls and whose evictable and protected sizes the budget reads); the output streamer and the KV receivers (they
    poll as the case says - the release's own ``_update_handshake_waiters`` polls them and reduces the polls over a
    one-rank gloo group - and record what they are sent).
    """
    from sglang.srt.disaggregation import decode
    from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    if case.host_threshold < 1 and (refusal := host_destination_refusal()) is not None:
        raise ServerRefuses(refusal)
    LoRAManager = _lora_manager()
    ps = case.page_size
    kvcache: Any = SimpleNamespace(page_size=ps)
    if case.swa_free_pages is None:
        allocator = _allocator(case.free_pages, ps, kvcache)
    else:
        kvcache, allocator = _hybrid_swa_pool(case.free_pages, case.swa_free_pages, ps)
    width = max(r.fill_len for r in case.requests) + ps
    req_pool = _request_rows(decode, width, case.request_rows, pre_alloc=0)
    streamed: list[Any] = []
    cleared: list[str] = []
    sent: dict[str, tuple[Any, ...]] = {}

    events: list[tuple[str, int]] = []

    class Receiver:
        """The request's KV receiver (a stand-in: a live one needs prefill): it polls as the case says - ``Failed``
        once it has failed (an aborted receiver has concluded so already: ``abort()`` sets ``conclude_state``; a
        failure prefill reported is concluded by the poll), else ready or still bootstrapping - and records what
        the queue sends it. In a PP pass a request the consensus put in the good list was ready on this stage when
        the stages agreed (the consensus is the stages' ready polls, intersected): its receiver polls ready unless it
        failed since."""

        require_staging = case.staging

        def __init__(self, rid: str) -> None:
            self.rid = rid
            i = int(rid[1:])
            request = case.requests[i]
            self.supports_host_destination = request.host_capable
            self.failed, self.ready = request.receiver_failed, case.ready(i)
            self.conclude_state = decode.KVPoll.Failed if self.failed == "abort" else None

        def poll(self) -> int:
            if self.failed is not None:
                self.conclude_state = decode.KVPoll.Failed
                return int(decode.KVPoll.Failed)
            return int(decode.KVPoll.WaitingForInput if self.ready else decode.KVPoll.Bootstrapping)

        def failure_exception(self) -> None:
            reason = {"abort": "Aborted by AbortReq.", "peer": "prefill reported the transfer failed"}.get(
                str(self.failed), "failed on another pipeline stage (the PP consensus)"
            )
            raise RuntimeError(f"room of {self.rid}: {reason}")

        def send_metadata(
            self, pages: Any, aux: Any, state: Any = None, decode_prefix_len: Any = None, **kw: Any
        ) -> None:
            sent[self.rid] = (pages, aux)
            events.append(("metadata", int(self.rid[1:])))

        init = send_metadata  # the same hand-over's name to 0.5.9

        def clear(self) -> None:
            cleared.append(self.rid)

    class HostPool:
        """Decode's host KV pool (a stand-in): hands out the case's host pages in order."""

        page_size = ps

        def __init__(self) -> None:
            self.free_pages = list(case.host_free_pages)

        def available_size(self) -> int:
            return len(self.free_pages) * ps

        def alloc(self, tokens: int) -> Any:
            count = -(-tokens // ps)
            if count > len(self.free_pages):
                return None
            pages, self.free_pages = self.free_pages[:count], self.free_pages[count:]
            return torch.tensor([p * ps + o for p in pages for o in range(ps)][:tokens], dtype=torch.int64)

        def free(self, indices: Any) -> None:
            raise AssertionError("the host pool frees nothing in one pass")

    held: set[str] = set()
    real_tree = _queue_tree_answers(decode, case)
    tree_locks: dict[int, str] = {}  # on SGLang's tree: each lock a matched prefix took, by the request's rid
    cached = {page for r in case.requests for page in r.prefix_pages} if case.radix else set()

    class Tree:
        """The decode radix cache's lock book (a stand-in: the tree itself is not under test): a lock per matched
        request, over a tree caching the queued requests' prefix pages. A page some lock holds is protected, the others
        evictable (``evictable_size``, which the budget counts: a lock takes its newly protected pages out of it)."""

        def lock(self, rid: str) -> str:
            held.add(rid)
            return rid

        def unlock(self, lock: str) -> None:
            held.discard(lock)

        def dec_lock_ref(self, node: Any, receipt: Any = None, skip_swa: bool = False) -> None:
            """The release of a match's lock: by its receipt (0.5.20 on), its ``swa_uuid_for_lock`` (0.5.19: bare or
            in ``DecLockRefParams``) or its node alone (0.5.18) - each the lock ``_match_prefix_and_lock`` took."""
            lock = node if receipt is None else receipt
            held.discard(getattr(lock, "swa_uuid_for_lock", lock))

        def maybe_hand_to_session(self, req: Any) -> None:
            pass

        def supports_mamba(self) -> bool:
            return False

        def release_swa(self, lock: str) -> None:
            pass

        def evict_for_alloc(self, params: Any) -> Any:
            return SimpleNamespace(num_tokens_evicted=0)  # nothing evictable: the case's pools are what there is

        evict = evict_for_alloc  # 0.5.18's name

        def protected_size(self) -> int:
            pages = {page for rid in held for page in case.requests[int(rid[1:])].prefix_pages}
            return len(pages) * ps

        def evictable_size(self) -> int:  # the budget counts it (0.5.18's log line reads it too)
            return len(cached) * ps - self.protected_size()

        full_evictable_size, full_protected_size = evictable_size, protected_size  # a hybrid SWA tree's (0.5.22 on)

        def swa_evictable_size(self) -> int:  # the SWA budget counts it (0.5.19 on): the prefixes hold no SWA pages
            return 0

    shift: list[int] = []
    swa_shift: list[int] = []

    class Queue(_queue_base()):  # type: ignore[misc]
        def _allocatable_token_budgets(self, *args: Any, **kw: Any) -> int:
            """The release's own full-side budget (``_allocatable_token_budgets``, ``_allocatable_tokens`` to
            0.5.11) - the free pool less the decode headroom of the active requests and of those this pass admitted
            (``extra_reserved_reqs``), or the largest running request's need - shifted by a constant so that its
            first read is the case's budget (the shift stands for what else the server holds back)."""
            return _shifted(shift, _release_budget(decode.DecodePreallocQueue, self, *args, **kw), case.token_budget)

        def _swa_tail_allocatable_token_budget(self, *args: Any, **kw: Any) -> int:
            """The release's own SWA budget (``_swa_tail_allocatable_token_budget``, 0.5.12 on) - the free SWA pool
            less the decode headroom of the active requests and of those this pass admitted, capped by what their
            windows can still grow (``sliding_window_size`` x active - SWA tokens in use), or the largest running
            request's SWA need - shifted by a constant so that its first read is the case's SWA budget, as the full
            side is. 0.5.12-0.5.18 read it once and decrement each admission themselves; 0.5.19 on re-read it after
            each. None in the case: the budget counts the radix cache's evictable SWA pages, so the reclaim
            decides (the one part still a stand-in)."""
            if case.swa_token_budget is None:
                return 10**9
            real = int(decode.DecodePreallocQueue._swa_tail_allocatable_token_budget(self, *args, **kw))
            return _shifted(swa_shift, real, case.swa_token_budget)

        def _match_prefix_and_lock(self, req: Any) -> Any:
            """The match of the request's device prefix (its whole pages), locked as ``match_kv_cache`` and
            ``tree_cache.lock`` would; on SGLang's own tree (``_queue_tree``) the release's own match and lock, whose
            lock on a matched prefix the book records (released by the tree's ``unlock``)."""
            if real_tree:
                match = decode.DecodePreallocQueue._match_prefix_and_lock(self, req)
                if match.l1_prefix_len > 0:
                    tree_locks[id(req.lock)] = req.rid
                return match
            pages = case.requests[int(req.rid[1:])].prefix_pages
            locations = [p * ps + o for p in pages for o in range(ps)]
            req.lock = self.tree_cache.lock(req.rid) if pages else None
            # 0.5.20 on release through dec_lock_ref(node, receipt); 0.5.19 passes the lock's swa_uuid_for_lock
            req.last_node = req.lock_receipt = req.swa_uuid_for_lock = req.lock
            return _prefix_match(torch.tensor(locations, dtype=torch.int64), 0)

    lora_manager = SimpleNamespace(max_loras_per_batch=case.max_loras or 1, num_pinned_loras=0)
    if hasattr(LoRAManager, "validate_lora_batch"):  # the releases whose gate reads it (0.5.20 on) all have it
        lora_manager.validate_lora_batch = types.MethodType(LoRAManager.validate_lora_batch, lora_manager)

    def can_schedule_lora_req(req: Any, running_loras: set[Any]) -> bool:
        """SGLang's own ``Scheduler.can_schedule_lora_req`` on the duck scheduler (no drainer, no overlap loading:
        the LoRA manager validates the batch with the request's adapter). Its module is imported at the first call,
        which only a release whose ``pop_preallocated`` gates admission on it makes (#39332, 0.5.20 on)."""
        scheduler_class = importlib.import_module("sglang.srt.managers.scheduler").Scheduler
        return bool(scheduler_class.can_schedule_lora_req(q.scheduler, req, running_loras))

    def stream_output(reqs: Any, logprob: Any) -> None:
        streamed.extend(r.rid for r in reqs)

    running = [
        _request(f"run{k}", tokens, 0, lora=lora, max_new_tokens=RUNNING_MAX_NEW_TOKENS)
        for k, (tokens, lora) in enumerate(case.running)
    ]
    q: Any = Queue()
    q.tree_cache = Tree()  # SGLang's own replaces it once the requests are built (their extra keys key the tree)
    q.tree_cache.disable, q.tree_cache.sidecar_pool_specs = False, []
    q.host_pool, q.host_swa_pool, q.host_reserved_tokens = HostPool(), None, case.host_reserved_tokens
    q.num_reserved_decode_tokens = case.reserved_decode_tokens
    q.scheduler = _scheduler(
        running,
        enable_priority_scheduling=case.priority_order is not None,
        schedule_low_priority_values_first=case.priority_order == "low_first",
        enable_lora=case.max_loras is not None,
        can_schedule_lora_req=can_schedule_lora_req,
        lora_drainer=None,
        enable_lora_overlap_loading=False,
        output_streamer=SimpleNamespace(stream_output=stream_output),
        stream_output=stream_output,  # the scheduler's own method to 0.5.12 (its output_streamer from 0.5.13)
        enable_decode_hicache=case.radix,
        sliding_window_size=case.window if case.swa_free_pages is not None else None,
        tp_worker=SimpleNamespace(
            is_hybrid_swa=case.swa_free_pages is not None, model_runner=SimpleNamespace(lora_manager=lora_manager)
        ),
        # the budget reads it to 0.5.10 (is_hybrid to 0.5.6.post2)
        model_config=SimpleNamespace(
            is_hybrid_swa=case.swa_free_pages is not None, is_hybrid=case.swa_free_pages is not None
        ),
        pool_stats_observer=SimpleNamespace(get_pool_stats=lambda: SimpleNamespace(full_token_usage=case.pool_usage)),
    )
    # a PP stage (pp_size > 1): the LoRA gate reads every microbatch's running batch (running_mbs: this one's, then
    # the other microbatch's requests), the handshake the consensus
    q.pp_size = 2 if case.pp_consensus else 1
    other = [_request(f"mb{k}", 4, 0, lora=lora) for k, lora in enumerate(case.microbatch_loras)]
    q.scheduler.running_mbs = [q.scheduler.running_batch, SimpleNamespace(reqs=other)]
    q.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(case.metadata_buffers)
    q.req_to_token_pool = req_pool
    q.token_to_kv_pool_allocator = allocator
    q.token_to_kv_pool = kvcache
    q.kv_manager = SimpleNamespace(
        kv_args=SimpleNamespace(state_types=[]),
        submit_prefill_recompute=lambda receiver, payload: events.append(("recompute", int(receiver.rid[1:]))),
    )
    q.transfer_queue = SimpleNamespace(
        enable_staging=case.staging, queue=[], staging_handler=_staging(ps, events) if case.staging else None
    )
    reqs = []
    for i, (r, prompt) in enumerate(zip(case.requests, _queue_prompts(case), strict=True)):
        req = _request(f"r{i}", r.length, r.output_len, lora=r.lora, max_new_tokens=r.max_new_tokens, prompt=prompt)
        for name, value in r.extra.items():  # registered request fields
            setattr(req, name, value)
        req.priority = r.priority
        if r.aborted:
            req.finished_reason = FINISH_ABORT("aborted while queued")
            req.finished_output = r.abort_streamed
        req.pd_rebootstrap_in_progress = r.rebootstrap
        req.bootstrap_host = "10.0.0.1"
        reqs.append(req)
    if real_tree:
        q.tree_cache = _queue_tree(
            case, req_pool, allocator, {r.lora: req.extra_key for r, req in zip(case.requests, reqs, strict=True)}
        )
        own_unlock = q.tree_cache.unlock

        def unlock(lock: Any) -> None:
            own_unlock(lock)
            tree_locks.pop(id(lock), None)

        q.tree_cache.unlock = unlock
    q.tree_cache.evict_host = lambda tokens: None  # the host pool's (row 9): no host copies here
    # rebootstrap came in 0.5.16 (the strategies draw it only from there): no such field before
    takes_rebootstrap = "is_rebootstrap" in inspect.signature(decode.DecodeRequest).parameters
    rebootstrap: list[dict[str, Any]] = [
        {"is_rebootstrap": r.rebootstrap} if takes_rebootstrap else {} for r in case.requests
    ]
    q.queue = [
        decode.DecodeRequest(
            req=req, kv_receiver=cast(Any, Receiver(req.rid)), waiting_for_input=r.bootstrapped, **flag
        )
        for req, r, flag in zip(reqs, case.requests, rebootstrap, strict=True)
    ]
    checked = [f"r{i}" for i, r in enumerate(case.requests) if r.checked] if case.restrict else None
    disagg = _disagg(radix=case.radix)
    disagg.disaggregation_decode_allocation_policy = case.allocation_policy
    disagg.disaggregation_decode_host_receive_threshold = _host_threshold(case.host_threshold)
    q.scheduler.server_args = disagg  # 0.5.19 and earlier read the flags there
    queued = [d.req.rid for d in q.queue]
    # rids_to_check, and the failed requests returned, came with the decode PP loop (#14945, 0.5.7): the strategies
    # restrict a pass only from there; before, the failed requests are those that left the queue unadmitted
    restricted = "rids_to_check" in inspect.signature(q.pop_preallocated).parameters
    with (
        _published(decode, disagg),
        _cpu_alloc_extend(),
    ):
        if case.pp_consensus:  # a PP stage: its scheduler's own step, given the consensus (good, bad in queue order)
            popped = _pp_prealloc_step(
                q,
                good=[f"r{i}" for i, r in enumerate(case.requests) if r.consensus == "good"],
                bad=[f"r{i}" for i, r in enumerate(case.requests) if r.consensus == "bad"],
            )
        else:
            popped = q.pop_preallocated(rids_to_check=checked) if restricted else q.pop_preallocated()
    if isinstance(popped, tuple):
        done, failed_rids = popped[0], [d.req.rid for d in popped[1]]
    else:
        left = {d.req.rid for d in q.queue} | {d.req.rid for d in popped}
        done, failed_rids = popped, [rid for rid in queued if rid not in left]

    def index(rid: str) -> int:
        return int(rid[1:])

    admissions: list[Admission] = []
    for d in done:
        got, buffer = sent[d.req.rid]
        i = index(d.req.rid)
        pages, dtype = int_tuple(got), str(np.asarray(got).dtype)
        if getattr(d, "host_staged", False):  # received into host memory (0.5.21 on): its host slots, no row
            host_slots = int_tuple(kv_book(d.req).retraction_backup.host_indices)
            admissions.append(Admission(i, pages, dtype, int(buffer), -1, host_slots, (), True))
            continue
        book = kv_book(d.req)
        row = req_pool.req_to_token[book.req_pool_idx]
        prefix = case.prefix_len(i)
        fresh = int_tuple(row[prefix : case.requests[i].fill_len])
        admissions.append(
            Admission(i, pages, dtype, int(buffer), int(book.req_pool_idx), fresh, int_tuple(row[:prefix]))
        )
    return queue_trace(
        admissions,
        failed=tuple(index(rid) for rid in failed_rids),
        remaining=tuple(index(d.req.rid) for d in q.queue),
        streamed=tuple(index(rid) for rid in streamed),
        cleared=tuple(index(rid) for rid in cleared),
        locked=tuple(sorted(index(rid) for rid in (set(tree_locks.values()) if real_tree else held))),
        rows_left=int(req_pool.available_size()),
        buffers_left=int(q.req_to_metadata_buffer_idx_allocator.available_size()),
        events=tuple(events),
        aborted_left=tuple(index(d.req.rid) for d in q.queue if isinstance(d.req.finished_reason, FINISH_ABORT)),
    )
