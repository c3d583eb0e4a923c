"""One pass of decode's pre-allocation queue (``DecodePreallocQueue.pop_preallocated``), ported from sglang 0.5.23
(decode radix cache with device prefixes; HiCache host hits are the one-request port's).

The pass polls every queued KV receiver first (``_update_handshake_waiters``): a request it looks at whose receiver
failed is aborted. A PP pass (``pp_size > 1``) polls none: it looks at the stages' consensus only, aborts its bad
requests and marks its good ones ready. It sorts the queue by priority (when priority scheduling is on), fails the
aborted requests it looks at, then admits in queue order: a request still bootstrapping is passed over, one whose LoRA
adapter does not fit is passed over, and the pass stops at the first request without a metadata buffer, a request row or
the token budget for ``_required_admission_tokens``. With the radix cache on, a request that reaches the budget check
matches its device prefix and locks it, and is checked against the budget re-read after the lock (its newly locked
pages are no longer evictable: the budget counts the tree's evictable pages); turned away there, it releases the
lock. An admitted request gets a row (its
prefix written to ``[0, P)``), fresh pages for ``[P, fill_len)`` in the allocator's free order, a metadata buffer, and
its destination list ``kv_to_page_indices(row[P:prefill_len])`` cast to int32. A rebootstrapped request matches nothing
and holds and receives its outputs too. The budget after each admission is
``_allocatable_token_budgets(extra_reserved_reqs=<device admissions>)`` shifted to start at the case's budget: less the
tokens allocated so far, what the admitted requests' headroom adds to the reserve and the pages locks hold. With a
hybrid SWA pool a request must also fit the SWA budget (stop otherwise), which each admission charges its tail's
page-aligned tokens and headroom, and then find SWA pages for its tail (it fails otherwise).

``PreallocPass`` keeps each step a method so that the mutant catalogue can replace one at a time.
"""

from __future__ import annotations

import numpy as np
import torch

from pdverify.model.layout import token_locations
from pdverify.model.queue import (
    CLIP_MAX_NEW_TOKENS,
    RUNNING_MAX_NEW_TOKENS,
    Admission,
    DecodeQueueCase,
    QueuedRequest,
    QueueTrace,
    queue_trace,
)
from pdverify.production.page_index import kv_to_page_indices


class PreallocPass:
    """The state of one pass: the queue, the pools, what was admitted and failed."""

    def __init__(self, case: DecodeQueueCase, device: str) -> None:
        self.case = case
        self.device = device
        self.queue: list[int] = list(range(len(case.requests)))
        self.free_pages = list(case.free_pages)
        self.free_buffers = list(range(case.metadata_buffers))
        self.free_rows = list(range(1, case.request_rows + 1))
        self.host_free = list(case.host_free_pages)
        self.swa_free = list(case.swa_free_pages or ())
        width = max((r.fill_len for r in case.requests), default=0) + case.page_size
        self.req_to_token = torch.zeros((case.request_rows + 1, width), dtype=torch.int32, device=device)
        self.allocated_tokens = 0
        self.device_admitted = 0
        self.swa_allocated = 0
        # loaded adapters: the running batch's - in a PP pass every microbatch's (``running_mbs``)
        self.loaded = {lora for _, lora in case.running} | set(case.microbatch_loras)
        self.removed: set[int] = set()
        self.events: list[tuple[str, int]] = []
        self.locks: set[int] = set()
        self.streamed: list[int] = []
        self.cleared: list[int] = []
        self.aborted = {i for i, r in enumerate(case.requests) if r.aborted}

    # -- the steps -------------------------------------------------------------------------------------------

    def poll_receivers(self) -> None:
        """``_update_handshake_waiters``: every queued receiver is polled; a failed one the pass looks at aborts its
        request (``prepare_abort``, 500) - a fresh abort, streamed by the abort scan. A PP pass polls no receiver: the
        consensus's ``pp_bad_rids`` are aborted (``poll_and_all_reduce_pp``)."""
        for i in self.queue:
            if self.looked_at(i) and self.case.handshake_failed(i):
                self.aborted.add(i)

    def sort_queue(self) -> None:
        order = self.case.priority_order
        if order is not None:
            sign = 1 if order == "low_first" else -1
            self.queue.sort(key=lambda i: self.case.requests[i].priority * sign)

    def looked_at(self, i: int) -> bool:
        """``rids_to_check`` - in a PP pass, the consensus's good and bad requests."""
        return self.case.looked_at(i)

    def fail_aborted(self) -> list[int]:
        failed = []
        for i in self.queue:
            req = self.case.requests[i]
            if self.looked_at(i) and i in self.aborted:
                if not req.abort_streamed:
                    self.streamed.append(i)
                self.cleared.append(i)
                failed.append(i)
        return failed

    def lora_fits(self, req: QueuedRequest) -> bool:
        max_loras = self.case.max_loras
        return max_loras is None or req.lora in self.loaded or len(self.loaded | {req.lora}) <= max_loras

    def reserved_tokens(self, extra_reserved_reqs: int) -> int:
        """What the budget keeps back: the decode headroom of the active requests (``_active_reserved_tokens``) or
        the largest running request's need with the others retracted (``_need_space_for_single_req``)."""
        running = self.case.running
        retractable = self.case.retractable_tokens
        single = max(
            (min(RUNNING_MAX_NEW_TOKENS, CLIP_MAX_NEW_TOKENS) + tokens - retractable for tokens, _ in running),
            default=0,
        )
        return max(self.case.reserved_decode_tokens * (len(running) + extra_reserved_reqs), single)

    def budget(self) -> int:
        """``_allocatable_token_budgets`` now: the case's budget less the tokens allocated, the growth of what it
        keeps back, and the radix cache's pages the current locks took out of the evictable (``evictable_size``)."""
        grown = self.reserved_tokens(self.device_admitted) - self.reserved_tokens(0)
        return self.case.token_budget - self.allocated_tokens - grown - self.locked_tokens()

    def locked_tokens(self) -> int:
        """The tokens of the radix cache's pages some lock holds (a page two locks hold counts once)."""
        pages = {page for i in self.locks for page in self.case.requests[i].prefix_pages}
        return len(pages) * self.case.page_size

    def prefix(self, i: int) -> int:
        """The device prefix request ``i`` matches (0: the radix cache is off, or the request rebootstraps)."""
        req = self.case.requests[i]
        return len(req.prefix_pages) * self.case.page_size if self.case.radix and not req.rebootstrap else 0

    def required_tokens(self, i: int) -> int:
        req, ps, prefix = self.case.requests[i], self.case.page_size, self.prefix(i)
        alloc = -(-req.fill_len // ps) * ps - prefix
        return max(
            alloc + self.case.reserved_decode_tokens,
            req.prefill_len - prefix + min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS) - self.case.retractable_tokens,
        )

    def fits(self, i: int) -> bool:
        """The budget check, with the prefix matched and locked first (the budget is re-read after the lock: "Matching
        may lock previously-evictable radix pages"); a request turned away releases it."""
        if self.prefix(i):
            self.locks.add(i)
        if self.required_tokens(i) > self.budget():
            self.locks.discard(i)
            return False
        return True

    def allocate(self, i: int) -> tuple[int, list[int]]:
        """A request row with the prefix in ``[0, P)`` and fresh locations for ``[P, fill_len)``, written to it."""
        req, ps, prefix = self.case.requests[i], self.case.page_size, self.prefix(i)
        row = self.free_rows.pop()
        if prefix:
            held = token_locations(list(req.prefix_pages), prefix, ps)
            self.req_to_token[row, :prefix] = torch.tensor(held, dtype=torch.int32, device=self.device)
        count = -(-req.fill_len // ps) - prefix // ps
        pages, self.free_pages = self.free_pages[:count], self.free_pages[count:]
        self.allocated_tokens += count * ps
        self.device_admitted += 1
        locations = token_locations(pages, req.fill_len - prefix, ps)
        if locations:
            self.req_to_token[row, prefix : req.fill_len] = torch.tensor(
                locations, dtype=torch.int32, device=self.device
            )
        return row, locations

    def verdict(self, i: int) -> str:
        """``"admit"``, ``"skip"`` (passed over: the next request may go) or ``"stop"`` (the pass ends here)."""
        req = self.case.requests[i]
        if not self.looked_at(i) or i in self.removed or not self.case.ready(i):
            return "skip"
        if not self.free_buffers:
            return "stop"
        if not self.lora_fits(req):
            return "skip"
        if self.case.to_host(i):  # ``_pre_alloc_host``: the host pool must hold the prompt plus its reserve
            ps = self.case.page_size
            need = -(-req.length // ps) * ps + self.case.host_reserved_tokens
            return "host" if len(self.host_free) * ps >= need else "stop"
        if not self.free_rows or not self.fits(i):
            return "stop"
        if self.case.swa_free_pages is not None:
            if not self.swa_fits(i):
                return "stop"
            if not self.reclaim_swa(i):
                return "fail"
        return "admit"

    def swa_reserved_tokens(self, extra_reserved_reqs: int) -> int:
        """What ``_swa_tail_allocatable_token_budget`` keeps back now, with ``extra_reserved_reqs`` admitted."""
        return self.case.swa_kept_back(extra_reserved_reqs, self.swa_allocated)

    def swa_budget(self) -> int | None:
        """``_swa_tail_allocatable_token_budget``, re-read after each admission: the case's SWA budget less the SWA
        pages admissions took and the growth of what it keeps back (None: it counts the radix cache's evictable SWA
        pages too, and the reclaim decides)."""
        budget = self.case.swa_token_budget
        if budget is None:
            return None
        grown = self.swa_reserved_tokens(self.device_admitted) - self.case.swa_kept_back(0, 0)
        return budget - self.swa_allocated - grown

    def swa_fits(self, i: int) -> bool:
        """The SWA side of ``_prealloc_reservation_fits``; a request turned away releases its lock."""
        budget = self.swa_budget()
        tail = self.case.swa_tail_len(i)
        new = min(self.case.requests[i].max_new_tokens, CLIP_MAX_NEW_TOKENS)
        need = max(self.swa_charge(i), tail + new - self.case.retractable_swa_tokens)
        if budget is not None and need > budget:
            self.locks.discard(i)
            return False
        return True

    def reclaim_swa(self, i: int) -> bool:
        """``_reclaim_swa_tail_capacity``: SWA pages for the window tail, or the request fails (its lock released)."""
        ps = self.case.page_size
        count = -(-self.case.swa_tail_len(i) // ps)
        if count > len(self.swa_free):
            self.locks.discard(i)
            return False
        self.swa_free = self.swa_free[count:]
        self.swa_allocated += count * ps
        return True

    def swa_charge(self, i: int) -> int:
        """``_prealloc_required_tokens``' SWA side: the tail's whole pages and, with the radix cache, the headroom."""
        return self.case.swa_required(i)

    def receive_on_host(self, i: int) -> tuple[list[int], np.ndarray]:
        """The host pages for the prompt, and the destination list naming them (int32)."""
        ps, length = self.case.page_size, self.case.requests[i].length
        count = -(-length // ps)
        pages, self.host_free = self.host_free[:count], self.host_free[count:]
        locations = token_locations(pages, count * ps, ps)
        return locations, np.array(pages, dtype=np.int32)

    def protected(self, i: int) -> int:
        """``cache_protected_len``: the prefix decode promised prefill (the tree owns ``[0, P)``)."""
        return self.prefix(i)

    def handshake(self, i: int, host: bool = False) -> None:
        """``_send_kv_metadata``: register with the staging handler first (its prefetch needs the room; not for a
        host destination), send the metadata, then - a rebootstrapped request under the early policy - ask
        prefill to recompute. The staging handler fails a room whose promised prefix is not page-aligned (its
        scatter offsets shift by that prefix): ``("staging failed", i)``."""
        if self.case.staging and not host:
            self.events.append(("staging" if self.protected(i) % self.case.page_size == 0 else "staging failed", i))
        self.events.append(("metadata", i))
        if self.case.requests[i].rebootstrap and self.case.allocation_policy == "early":
            self.events.append(("recompute", i))

    def destination(self, i: int, row: int) -> np.ndarray:
        req = self.case.requests[i]
        kv = self.req_to_token[row, self.prefix(i) : req.prefill_len]
        return kv_to_page_indices(kv, self.case.page_size).astype(np.int32)

    # -- the pass --------------------------------------------------------------------------------------------

    def admit(self, i: int, *, host: bool) -> Admission:
        """Pre-allocate and register an admitted request: host pages, or a row with its prefix and fresh pages."""
        self.removed.add(i)
        self.loaded.add(self.case.requests[i].lora)
        prefix: tuple[int, ...] = ()
        if host:
            locations, dest = self.receive_on_host(i)
            self.handshake(i, host=True)
            row = -1
        else:
            row, locations = self.allocate(i)
            dest = self.destination(i, row)
            self.handshake(i)
            prefix = tuple(int(v) for v in self.req_to_token[row, : self.prefix(i)].tolist())
        pages = tuple(int(p) for p in dest)
        aux = self.free_buffers.pop(0)
        return Admission(i, pages, str(dest.dtype), aux, row, tuple(locations), prefix, host)

    def run(self) -> QueueTrace:
        self.poll_receivers()
        self.sort_queue()
        failed = self.fail_aborted()
        self.removed.update(failed)
        admissions: list[Admission] = []
        for i in self.queue:
            verdict = self.verdict(i)
            if verdict == "stop":
                break
            if verdict == "skip":
                continue
            if verdict == "fail":  # aborted with 503: streamed, its receiver released, out of the queue
                failed.append(i)
                self.streamed.append(i)
                self.cleared.append(i)
                self.removed.add(i)
                continue
            admissions.append(self.admit(i, host=verdict == "host"))
        return queue_trace(
            admissions,
            failed=tuple(failed),
            remaining=tuple(i for i in self.queue if i not in self.removed),
            streamed=tuple(self.streamed),
            cleared=tuple(self.cleared),
            locked=tuple(sorted(self.locks)),
            rows_left=len(self.free_rows),
            buffers_left=len(self.free_buffers),
            events=tuple(self.events),
            aborted_left=tuple(i for i in self.queue if i not in self.removed and i in self.aborted),
        )


def decode_queue(case: DecodeQueueCase, device: str) -> QueueTrace:
    return PreallocPass(case, device).run()
