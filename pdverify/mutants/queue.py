"""Faults in decode's pre-allocation queue: pdverify's port of one ``pop_preallocated`` pass with one step replaced.

Each mutant is a ``PreallocPass`` whose single method (or one line of its loop's rule) does what a slip in
SGLang's admission loop could: the wrong exit on a condition, an off-by-one on a pool, a budget not refreshed,
the sort or ``rids_to_check`` lost, a page handed out twice.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pdverify.model.queue import DecodeQueueCase, QueueTrace
from pdverify.mutants.catalogue import mutant
from pdverify.production.decode_queue import PreallocPass
from pdverify.production.page_index import kv_to_page_indices


@mutant("XQ01", "decode_queue", "missing removal", "aborted requests reported failed but left in the queue")
def aborted_left_queued(case: DecodeQueueCase, device: str) -> QueueTrace:
    run = PreallocPass(case, device)
    trace = run.run()
    return replace(trace, remaining=tuple(i for i in run.queue if i not in trace.admitted))


@mutant("XQ02", "decode_queue", "double report", "an abort streamed again though it already was")
def abort_streamed_twice(case: DecodeQueueCase, device: str) -> QueueTrace:
    trace = PreallocPass(case, device).run()
    return replace(trace, streamed=trace.failed)


class _StopAtBootstrapping(PreallocPass):
    def verdict(self, i: int) -> str:
        req = self.case.requests[i]
        if self.looked_at(i) and i not in self.removed and not req.bootstrapped:
            return "stop"
        return super().verdict(i)


@mutant("XQ03", "decode_queue", "wrong exit", "a request still bootstrapping stops admission instead of being passed")
def stop_at_bootstrapping(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _StopAtBootstrapping(case, device).run()


class _StopAtLora(PreallocPass):
    def verdict(self, i: int) -> str:
        verdict = super().verdict(i)
        req = self.case.requests[i]
        if verdict == "skip" and self.looked_at(i) and i not in self.removed and req.bootstrapped:
            return "stop"  # passed over for its adapter: break instead of continue
        return verdict


@mutant("XQ04", "decode_queue", "wrong exit", "a request whose LoRA adapter does not fit stops admission (break)")
def stop_at_lora(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _StopAtLora(case, device).run()


class _OneBufferMore(PreallocPass):
    def __init__(self, case: DecodeQueueCase, device: str) -> None:
        super().__init__(case, device)
        self.free_buffers = list(range(case.metadata_buffers + 1))  # "available <= 0" read as "< 0"


@mutant("XQ05", "decode_queue", "off by one", "one request admitted past the last free metadata buffer")
def one_buffer_more(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _OneBufferMore(case, device).run()


class _StaleBudget(PreallocPass):
    def budget(self) -> int:
        return self.case.token_budget  # not refreshed after an admission


@mutant("XQ06", "decode_queue", "stale state", "every request checked against the budget before the pass")
def stale_budget(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _StaleBudget(case, device).run()


class _PriorityReversed(PreallocPass):
    def sort_queue(self) -> None:
        order = self.case.priority_order
        if order is not None:
            sign = -1 if order == "low_first" else 1
            self.queue.sort(key=lambda i: self.case.requests[i].priority * sign)


@mutant("XQ07", "decode_queue", "wrong order", "schedule_low_priority_values_first read the wrong way round")
def priority_reversed(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PriorityReversed(case, device).run()


@mutant("XQ08", "decode_queue", "lost order", "the queue after the pass in arrival order, not the priority order")
def sort_not_kept(case: DecodeQueueCase, device: str) -> QueueTrace:
    trace = PreallocPass(case, device).run()
    return replace(trace, remaining=tuple(sorted(trace.remaining)))


class _AllLookedAt(PreallocPass):
    def looked_at(self, i: int) -> bool:
        return True


@mutant("XQ09", "decode_queue", "ignored argument", "rids_to_check ignored: the whole queue is looked at")
def rids_ignored(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _AllLookedAt(case, device).run()


class _PagesReused(PreallocPass):
    def allocate(self, i: int) -> tuple[int, list[int]]:
        free = list(self.free_pages)
        row, locations = super().allocate(i)
        self.free_pages = free  # the free list is not advanced: the next request gets the same pages
        return row, locations


@mutant("XQ10", "decode_queue", "double allocation", "the free page list not advanced after an admission")
def pages_reused(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PagesReused(case, device).run()


class _HeadroomIgnored(PreallocPass):
    def required_tokens(self, i: int) -> int:
        ps = self.case.page_size
        return -(-self.case.requests[i].fill_len // ps) * ps - self.prefix(i)  # the pages only: no headroom


@mutant("XQ11", "decode_queue", "missing term", "admission counts a request's pages only, not its decode headroom")
def headroom_ignored(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _HeadroomIgnored(case, device).run()


class _Int64Destinations(PreallocPass):
    def destination(self, i: int, row: int) -> np.ndarray:
        return super().destination(i, row).astype(np.int64)


@mutant("XQ12", "decode_queue", "dtype", "destination list sent as int64 (the wire reads int32)")
def int64_destinations(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _Int64Destinations(case, device).run()


class _DestinationFloored(PreallocPass):
    # (was: up to fill_len instead of L - equivalent on every reachable input: a first-time request holds no output
    # beyond the one fill_len leaves out, and a rebootstrapped one's fill_len is L)
    def destination(self, i: int, row: int) -> np.ndarray:
        ps = self.case.page_size
        kv = self.req_to_token[row, self.prefix(i) : self.case.requests[i].prefill_len // ps * ps]
        return kv_to_page_indices(kv, ps).astype(np.int32)


@mutant("XQ13", "decode_queue", "wrong end", "the destination list ends at L floored to a page: the partial page lost")
def destination_floored(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _DestinationFloored(case, device).run()


class _LockKept(PreallocPass):
    def fits(self, i: int) -> bool:
        locked = bool(self.prefix(i))
        ok = super().fits(i)
        if locked:
            self.locks.add(i)  # turned away for memory, the request keeps its radix lock
        return ok


@mutant("XQ14", "decode_queue", "missing release", "a request turned away for memory keeps its radix prefix lock")
def lock_kept(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _LockKept(case, device).run()


class _RebootstrapAsNew(PreallocPass):
    def destination(self, i: int, row: int) -> np.ndarray:
        req = self.case.requests[i]
        kv = self.req_to_token[row, self.prefix(i) : req.length]  # the prompt only, as for a fresh request
        return kv_to_page_indices(kv, self.case.page_size).astype(np.int32)


@mutant("XQ15", "decode_queue", "wrong end", "a rebootstrapped request's destination list stops at its prompt")
def rebootstrap_prompt_only(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _RebootstrapAsNew(case, device).run()


class _RebootstrapMatches(PreallocPass):
    def prefix(self, i: int) -> int:
        req = self.case.requests[i]
        return len(req.prefix_pages) * self.case.page_size if self.case.radix else 0


@mutant("XQ16", "decode_queue", "missing guard", "a rebootstrapped request matches the radix cache like a new one")
def rebootstrap_matches(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _RebootstrapMatches(case, device).run()


class _PrefixCharged(PreallocPass):
    def required_tokens(self, i: int) -> int:
        ps, req = self.case.page_size, self.case.requests[i]
        return max(
            -(-req.fill_len // ps) * ps + self.case.reserved_decode_tokens,
            req.prefill_len + min(req.max_new_tokens, 4096) - self.case.retractable_tokens,
        )  # the matched prefix counted again


@mutant("XQ17", "decode_queue", "double count", "admission charges a request for its matched prefix too")
def prefix_charged(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PrefixCharged(case, device).run()


class _StagingLate(PreallocPass):
    def handshake(self, i: int, host: bool = False) -> None:
        super().handshake(i, host)
        if ("staging", i) in self.events:  # registered after the metadata went out: the prefetch is dropped
            self.events.remove(("staging", i))
            self.events.append(("staging", i))


@mutant("XQ18", "decode_queue", "wrong order", "the staging handler registers a request after its metadata is sent")
def staging_late(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _StagingLate(case, device).run()


class _RecomputeAlways(PreallocPass):
    def handshake(self, i: int, host: bool = False) -> None:
        super().handshake(i, host)
        if self.case.requests[i].rebootstrap and self.case.allocation_policy != "early":
            self.events.append(("recompute", i))


@mutant(
    "XQ19", "decode_queue", "ignored setting", "prefill asked to recompute a rebootstrapped request under any policy"
)
def recompute_always(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _RecomputeAlways(case, device).run()


class _RecomputeFirst(PreallocPass):
    def handshake(self, i: int, host: bool = False) -> None:
        super().handshake(i, host)
        if ("recompute", i) in self.events:
            self.events.remove(("recompute", i))
            self.events.insert(self.events.index(("metadata", i)), ("recompute", i))


@mutant("XQ20", "decode_queue", "wrong order", "recompute requested before the destinations are registered")
def recompute_first(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _RecomputeFirst(case, device).run()


class _HostReserveIgnored(PreallocPass):
    def verdict(self, i: int) -> str:
        verdict = super().verdict(i)
        if verdict == "stop" and self.case.to_host(i) and self.free_buffers and self.lora_fits(self.case.requests[i]):
            ps = self.case.page_size
            if len(self.host_free) * ps >= -(-self.case.requests[i].length // ps) * ps:
                return "host"  # the host reserve not counted
        return verdict


@mutant("XQ21", "decode_queue", "missing term", "host receive admits a request without the host reserve")
def host_reserve_ignored(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _HostReserveIgnored(case, device).run()


@mutant("XQ22", "decode_queue", "missing guard", "a rebootstrapped request is received into host memory")
def host_rebootstrap(case: DecodeQueueCase, device: str) -> QueueTrace:
    requests = tuple(replace(r, rebootstrap=False) if r.host_capable else r for r in case.requests)
    trace = PreallocPass(replace(case, requests=requests), device).run()
    return trace


class _HostTakesRow(PreallocPass):
    def receive_on_host(self, i: int) -> tuple[list[int], np.ndarray]:
        if self.free_rows:
            self.free_rows.pop()  # a request row taken for a host-received request
        return super().receive_on_host(i)


@mutant("XQ23", "decode_queue", "wrong resource", "a host-received request also takes a request-to-token row")
def host_takes_row(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _HostTakesRow(case, device).run()


class _HostStaged(PreallocPass):
    def handshake(self, i: int, host: bool = False) -> None:
        super().handshake(i, False)


@mutant("XQ24", "decode_queue", "missing guard", "a host destination registers with decode's staging handler")
def host_staged(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _HostStaged(case, device).run()


class _SwaStops(PreallocPass):
    def verdict(self, i: int) -> str:
        verdict = super().verdict(i)
        return "stop" if verdict == "fail" else verdict  # break instead of failing the request and going on


@mutant("XQ25", "decode_queue", "wrong exit", "a request whose SWA tail finds no room stops the pass")
def swa_short_stops(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _SwaStops(case, device).run()


class _SwaLockKept(PreallocPass):
    def reclaim_swa(self, i: int) -> bool:
        locked = i in self.locks
        ok = super().reclaim_swa(i)
        if locked:
            self.locks.add(i)
        return ok


@mutant("XQ26", "decode_queue", "missing release", "a request failed for its SWA tail keeps its radix lock")
def swa_lock_kept(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _SwaLockKept(case, device).run()


@mutant("XQ27", "decode_queue", "dropped report", "a request failed for its SWA tail is not streamed to the client")
def swa_not_streamed(case: DecodeQueueCase, device: str) -> QueueTrace:
    trace = PreallocPass(case, device).run()
    aborted = {i for i in trace.failed if case.requests[i].aborted or case.requests[i].receiver_failed}
    return replace(trace, streamed=tuple(i for i in trace.streamed if i in aborted))


class _BufferKept(PreallocPass):
    def fits(self, i: int) -> bool:
        ok = super().fits(i)
        if not ok and self.free_buffers:
            self.free_buffers.pop()  # taken for the request before the budget check, never given back
        return ok


@mutant("XQ28", "decode_queue", "missing release", "a request the budget turns away keeps the metadata buffer it took")
def buffer_kept(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _BufferKept(case, device).run()


class _ProtectedPartialPage(PreallocPass):
    def protected(self, i: int) -> int:
        return super().protected(i) + self.case.requests[i].fill_len % self.case.page_size


@mutant("XQ29", "decode_queue", "wrong offset", "the prefix promised to staging counts the last partial page")
def protected_partial_page(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _ProtectedPartialPage(case, device).run()


class _SwaBudgetIgnored(PreallocPass):
    def swa_fits(self, i: int) -> bool:
        return True


@mutant("XQ30", "decode_queue", "missing guard", "a request is admitted whatever the SWA budget left")
def swa_budget_ignored(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _SwaBudgetIgnored(case, device).run()


class _SwaHeadroomFree(PreallocPass):
    def swa_reserved_tokens(self, extra_reserved_reqs: int) -> int:
        return super().swa_reserved_tokens(0)  # re-read without extra_reserved_reqs


@mutant(
    "XQ31",
    "decode_queue",
    "wrong count",
    "the SWA budget's re-read keeps back no headroom for the requests the pass admitted",
)
def swa_headroom_free(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _SwaHeadroomFree(case, device).run()


class _HeadroomNotReserved(PreallocPass):
    def budget(self) -> int:
        return self.case.token_budget - self.allocated_tokens  # re-read without extra_reserved_reqs


@mutant("XQ32", "decode_queue", "missing term", "the budget re-read keeps back no headroom for the requests admitted")
def headroom_not_reserved(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _HeadroomNotReserved(case, device).run()


class _ReceiversNotPolled(PreallocPass):
    def poll_receivers(self) -> None:
        pass


@mutant(
    "XQ33", "decode_queue", "missing poll", "a failed KV receiver is never polled: its request is admitted as ready"
)
def receivers_not_polled(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _ReceiversNotPolled(case, device).run()


class _PollSkippedWhenReady(PreallocPass):
    def poll_receivers(self) -> None:
        if not all(self.case.requests[i].bootstrapped for i in self.queue):
            super().poll_receivers()


@mutant(
    "XQ34",
    "decode_queue",
    "early return",
    "the receivers are not polled while every queued one is ready (#37483's form)",
)
def poll_skipped_when_ready(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PollSkippedWhenReady(case, device).run()


class _PollIgnoresRidsToCheck(PreallocPass):
    def poll_receivers(self) -> None:
        self.aborted.update(i for i in self.queue if self.case.requests[i].receiver_failed is not None)


@mutant("XQ35", "decode_queue", "missing guard", "a failed receiver outside rids_to_check aborts its request")
def poll_ignores_rids_to_check(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PollIgnoresRidsToCheck(case, device).run()


class _PpGoodNotReady(PreallocPass):
    def verdict(self, i: int) -> str:
        if self.case.pp_consensus and self.looked_at(i) and not self.case.requests[i].bootstrapped:
            return "skip"  # waiting_for_input is not set from pp_good_rids
        return super().verdict(i)


@mutant("XQ37", "decode_queue", "missing update", "a PP pass does not mark the consensus's good requests ready")
def pp_good_not_ready(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PpGoodNotReady(case, device).run()


class _PpPollsReceivers(_PpGoodNotReady):
    def poll_receivers(self) -> None:
        # the stage polls its own receivers as a pass without PP does: neither consensus list is read
        self.aborted.update(i for i in self.queue if self.looked_at(i) and self.case.requests[i].receiver_failed)


@mutant(
    "XQ36",
    "decode_queue",
    "ignored argument",
    "a PP pass polls its own receivers instead of taking the consensus (the stages can diverge: #31869's fix undone)",
)
def pp_polls_receivers(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PpPollsReceivers(case, device).run()


class _PpWholeQueue(PreallocPass):
    def looked_at(self, i: int) -> bool:
        return True if self.case.pp_consensus else super().looked_at(i)


@mutant(
    "XQ38",
    "decode_queue",
    "ignored argument",
    "a PP pass looks at the whole queue (rids_to_check not set from the consensus's good and bad requests)",
)
def pp_whole_queue(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PpWholeQueue(case, device).run()


class _PpOneMicrobatch(PreallocPass):
    def __init__(self, case: DecodeQueueCase, device: str) -> None:
        super().__init__(case, device)
        self.loaded = {lora for _, lora in case.running}  # the other microbatches' adapters left out


@mutant(
    "XQ39",
    "decode_queue",
    "missing term",
    "a PP pass's LoRA gate counts this microbatch's running adapters only (running_batch, not running_mbs)",
)
def pp_one_microbatch(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _PpOneMicrobatch(case, device).run()


class _BudgetBeforeLock(PreallocPass):
    def fits(self, i: int) -> bool:
        budget = self.budget()  # read before the request's own lock, as if matching took nothing evictable
        if self.prefix(i):
            self.locks.add(i)
        if self.required_tokens(i) > budget:
            self.locks.discard(i)
            return False
        return True


@mutant(
    "XQ40",
    "decode_queue",
    "stale read",
    "the budget check reads the budget from before the request's own radix lock (its prefix still counted evictable)",
)
def budget_before_lock(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _BudgetBeforeLock(case, device).run()


class _LocksStayEvictable(PreallocPass):
    def locked_tokens(self) -> int:
        return 0


@mutant(
    "XQ41",
    "decode_queue",
    "missing term",
    "the budget counts the radix cache's locked pages as evictable (a lock protects nothing from the budget)",
)
def locks_stay_evictable(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _LocksStayEvictable(case, device).run()


class _LockedPagesPerLock(PreallocPass):
    def locked_tokens(self) -> int:
        return sum(len(self.case.requests[i].prefix_pages) for i in self.locks) * self.case.page_size


@mutant(
    "XQ42",
    "decode_queue",
    "wrong count",
    "the budget takes a radix page out once per lock holding it (a prefix two requests share is counted twice)",
)
def locked_pages_per_lock(case: DecodeQueueCase, device: str) -> QueueTrace:
    return _LockedPagesPerLock(case, device).run()
