"""F1 reproducer: SGLang decode names unheld pages in its full-from-0 state lists while a HiCache restore is pending.

Standalone: imports only sglang, torch, numpy and the standard library.

Runs SGLang's real ``DecodePreallocQueue.pop_preallocated`` (with its real ``_pre_alloc``,
``alloc_for_decode_prealloc``, ``_send_kv_metadata``, budget checks and HiCache hooks) on CPU, over the real
``DecodeReqToTokenPool``, ``PagedTokenToKVPoolAllocator`` and ``Req``. Stand-ins, for what needs a GPU or live
peers only: the KV receiver (records what ``send_metadata`` would put on the wire), the prefill handshake
(``_resolve_pending_reqs`` / ``_update_handshake_waiters``: network), the decode radix tree
(``_match_prefix_and_lock`` returns the match a HiRadixCache would return: an L1 device prefix plus an L2 host
hit whose restore is still pending), the KV pool object (``page_size`` only: the MXFP8/QSA pools need a GPU)
and the server-argument accessors ``get_disagg`` / ``get_memory``.

Exit 1 while the defect is present, 0 on a fixed SGLang.
"""

from __future__ import annotations

import sys
import warnings
from array import array
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch

warnings.filterwarnings("ignore")

from sglang.srt.disaggregation import decode  # noqa: E402
from sglang.srt.disaggregation.base.conn import StateType  # noqa: E402
from sglang.srt.disaggregation.decode_hicache_mixin import DecodePrefixMatch  # noqa: E402
from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator  # noqa: E402
from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

FULL_FROM_ZERO = (StateType.QSA_COMPRESSED, StateType.MINIMAX_DENSE_KV, StateType.BLOCK_SCALE)


class Receiver:
    """The KV receiver: records the destination lists decode registers with prefill."""

    supports_host_destination = False

    def __init__(self) -> None:
        self.sent = None

    def send_metadata(self, kv_pages, aux_index, state_indices, decode_prefix_len=None, **kwargs):
        self.sent = SimpleNamespace(
            kv_pages=[int(p) for p in np.asarray(kv_pages)],
            state=[None if s is None else [int(p) for p in np.asarray(s)] for s in state_indices],
            decode_prefix_len=decode_prefix_len,
        )


class TreeCache:
    """The decode radix cache as ``pop_preallocated`` / ``_pre_alloc`` consult it (nothing evictable here)."""

    def evictable_size(self):
        return 0

    def protected_size(self):
        return 0

    def evict_for_alloc(self, params):
        return SimpleNamespace(num_tokens_evicted=0)

    def maybe_hand_to_session(self, req):
        pass

    def supports_mamba(self):
        return False

    def lock(self, node):
        return node

    def unlock(self, lock):
        pass


class DecodeNode(decode.DecodePreallocQueue):
    """SGLang's decode pre-allocation queue, ``__init__`` skipped (it registers with a live transfer engine)."""

    def __init__(self, *, page_size: int, num_pages: int, rows: int, context_len: int, state_types, cached_pages=()):
        self.pp_size = 1
        self.queue, self.pending_reqs, self.retracted_queue = [], [], []
        self.num_reserved_decode_tokens = 0
        self._num_published_destinations = 0
        self.draft_token_to_kv_pool = None
        self.transfer_backend = None
        self.transfer_queue = SimpleNamespace(enable_staging=False, queue=[])
        self.tree_cache = TreeCache()
        self.scheduler = SimpleNamespace(
            running_batch=SimpleNamespace(reqs=[]),
            waiting_queue=[],
            last_batch=None,
            enable_priority_scheduling=False,
            enable_hisparse=False,
            enable_lora=False,
            enable_decode_hicache=True,  # --disaggregation-decode-enable-radix-cache + --enable-hierarchical-cache
            sliding_window_size=None,
            tp_worker=SimpleNamespace(is_hybrid_swa=False),
        )
        # The device KV pool (MXFP8 / QSA pools need a GPU); the payloads read only its page size.
        self.token_to_kv_pool = SimpleNamespace(page_size=page_size)
        self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
            num_pages * page_size, page_size, torch.int64, "cpu", kvcache=self.token_to_kv_pool, need_sort=False
        )
        # Pages the radix cache holds on the device (a cached prefix) are not on the free list.
        free = self.token_to_kv_pool_allocator.free_pages
        self.token_to_kv_pool_allocator.free_pages = free[~torch.isin(free, torch.tensor(list(cached_pages)))]
        self.req_to_token_pool = decode.DecodeReqToTokenPool(rows, context_len, "cpu", False, 0)
        self.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(8)
        self.kv_manager = SimpleNamespace(kv_args=SimpleNamespace(state_types=list(state_types)))
        self.page_size = page_size
        self.matches = {}  # rid -> (L1 device token locations, L2 host hit tokens)

    # The prefill handshake needs live connections: every queued request is already bootstrapped.
    def _resolve_pending_reqs(self):
        pass

    def _update_handshake_waiters(self, *args):
        pass

    def _match_prefix_and_lock(self, req):
        """What HiRadixCache's match returns: an L1 device prefix and an L2 host hit (restore pending)."""
        l1, host_hit = self.matches.get(req.rid, ([], 0))
        req.lock = self.tree_cache.lock(req.rid)
        return DecodePrefixMatch(
            prefix_indices=torch.tensor(l1, dtype=torch.int64),
            l2_host_hit_length=host_hit,
            l3_storage_hit_length=0,
            last_device_node=None,
        )

    def admit(self, rid: str, length: int, *, l1_pages=(), host_hit: int = 0, max_new_tokens: int = 64):
        """One ``pop_preallocated`` pass admitting a fresh request of ``length`` prompt tokens."""
        ps = self.page_size
        self.matches[rid] = ([p * ps + o for p in l1_pages for o in range(ps)], host_hit)
        req = Req(rid, "", array("q", [1] * length), SamplingParams(max_new_tokens=max_new_tokens),
                  bootstrap_host="10.0.0.1", bootstrap_port=8998, bootstrap_room=len(self.matches))  # fmt: skip
        receiver = Receiver()
        self.queue = [decode.DecodeRequest(req=req, kv_receiver=receiver, waiting_for_input=True)]
        free_before = set(self.token_to_kv_pool_allocator.free_pages.tolist())
        disagg = SimpleNamespace(
            disaggregation_decode_host_receive_threshold=1.0,
            disaggregation_decode_enable_radix_cache=True,
            disaggregation_decode_allocation_policy="early",
        )
        with (
            mock.patch.object(decode, "get_disagg", lambda: disagg),
            mock.patch.object(decode, "get_memory", lambda: SimpleNamespace(disable_radix_cache=False)),
        ):
            done, failed = self.pop_preallocated()
        assert [d.req.rid for d in done] == [rid] and not failed, f"{rid} was not admitted"
        taken = free_before - set(self.token_to_kv_pool_allocator.free_pages.tolist())
        row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx].tolist()
        return SimpleNamespace(req=req, sent=receiver.sent, taken=taken, row=row, row_idx=int(req.kv.req_pool_idx),
                               l1_pages=list(l1_pages))  # fmt: skip

    def release(self, admitted):
        """The request finished: its row goes back (``DecodeReqToTokenPool.free``, which keeps the row's contents)
        and the radix cache, having backed its pages up to the host (HiCache), evicts them from the device."""
        ps = self.page_size
        own = sorted(admitted.taken)
        self.req_to_token_pool.free(admitted.req)
        self.token_to_kv_pool_allocator.free(torch.tensor([p * ps + o for p in own for o in range(ps)]))


def check(node: DecodeNode, got, *, others=()):
    """Every page of every full-from-0 state list must be the page the request holds for that logical page:
    its L1 prefix page, or a page pre-allocation took from the allocator for it (None: it holds none yet)."""
    ps, length = node.page_size, len(got.req.origin_input_ids)
    l1 = len(got.l1_pages) * ps
    n_pages = -(-length // ps)
    held = []
    for j in range(n_pages):
        pos = j * ps
        if pos < l1:
            held.append(got.l1_pages[j])
        elif got.row[pos] // ps in got.taken:
            held.append(got.row[pos] // ps)
        else:
            held.append(None)  # the request holds no page for it (a HiCache restore still pending)
    lists, problems = [], []
    for st, values in zip(node.kv_manager.kv_args.state_types, got.sent.state):
        if st not in FULL_FROM_ZERO or values is None:
            continue
        lists.append((st.name, values))
        start = n_pages - len(values)  # 0 for a list from position 0
        for i, page in enumerate(values):
            j = start + i
            if held[j] == page:
                continue
            span = f"[{j * ps}, {min((j + 1) * ps, length)})"
            if page == 0:
                what = "the padding page 0"
            elif any(page in o.taken for o in others):
                owner = next(o for o in others if page in o.taken)
                what = f"page {page}, which live request {owner.req.rid} holds for its own KV"
            elif page in held:
                what = f"page {page}, this request's own page for logical page {held.index(page)}"
            else:
                what = f"page {page}, a page the request does not hold"
            problems.append(f"{st.name} positions {span} -> {what}")
    shown = ["-" if h is None else h for h in held]
    lists_text = "; ".join(f"{name} list {values}" for name, values in lists)
    verdict = "; ".join(problems) if problems else "every page held"
    return f"decode registers {lists_text}, the request holds {shown} ('-': no page yet): {verdict}", bool(problems)


def production() -> tuple[str, bool]:
    """--kv-cache-dtype mxfp8 (BLOCK_SCALE), page size 128, a multi-turn conversation on a reused row."""
    ps, system_page = 128, 40
    node = DecodeNode(page_size=ps, num_pages=64, rows=2, context_len=1024,
                      state_types=[StateType.BLOCK_SCALE], cached_pages=(system_page,))  # fmt: skip
    # Turn 1 of conversation A: 512 prompt tokens, its 128-token system prompt cached on the device (L1).
    a = node.admit("A", 512, l1_pages=[system_page])
    node.release(a)  # A finishes; its pages [128, 512) are backed up to host and evicted from the device
    c = node.admit("C", 300)  # another conversation, still running: it is given the pages A gave back
    # Turn 2 of A (request B): its first 512 tokens hit the cache - 128 on device (L1), 384 on host (L2,
    # restore pending) - and it gets the request-to-token row A used.
    b = node.admit("B", 700, l1_pages=[system_page], host_hit=384)
    result, bad = check(node, b, others=[c])
    text = (
        f"Production-shaped (--kv-cache-dtype mxfp8 -> BLOCK_SCALE state list, page size {ps}, decode radix cache "
        f"+ HiCache): request A (512 tokens, row {a.row_idx}, pages {sorted(a.taken)} after its "
        f"cached system-prompt page {system_page}) finished and its pages went back to the pool; live request C "
        f"(300 tokens, row {c.row_idx}) now holds pages {sorted(c.taken)}; request B, A's next turn "
        f"(700 tokens), matches 128 tokens on device (L1) and 384 on host (L2, restore pending) and gets A's old "
        f"row {b.row_idx}; decode sends decode_prefix_len={b.sent.decode_prefix_len}, main KV pages "
        f"{b.sent.kv_pages}, and {result}."
    )
    return text, bad


def shrunk() -> tuple[str, bool]:
    """The shrunk counterexample: page size 1, L = 1, D = 1 (L1 0 + host 1), QSA_COMPRESSED, a fresh row."""
    node = DecodeNode(page_size=1, num_pages=9, rows=2, context_len=2, state_types=[StateType.QSA_COMPRESSED])
    r = node.admit("r0", 1, host_hit=1, max_new_tokens=4)
    result, bad = check(node, r)
    text = (
        f"Shrunk (page size 1, L=1, L1=0, host hit 1, fresh row, QSA_COMPRESSED): decode sends decode_prefix_len="
        f"{r.sent.decode_prefix_len}, main KV pages {r.sent.kv_pages}, and {result}."
    )
    return text, bad


def main() -> int:
    results = [production(), shrunk()]
    broken = any(bad for _, bad in results)
    verdict = (
        "F1 PRESENT: pop_preallocated builds decode's full-from-0 state lists (QSA_COMPRESSED / MINIMAX_DENSE_KV / "
        "BLOCK_SCALE) from req_to_token[row, :seq_len] while the HiCache restore of [L1, D) is pending (_pre_alloc "
        "writes only [0, L1) and [D, fill_len)), so they name page 0 or a stale page id of a reused row, and prefill "
        "writes its state for [L1, D) into that page."
        if broken
        else "F1 absent: every page of decode's full-from-0 state lists is a page the request holds."
    )
    print(" ".join(text for text, _ in results) + " " + verdict)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
