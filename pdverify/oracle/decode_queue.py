"""Oracle of one pass of decode's pre-allocation queue (``pop_preallocated``), from its contract, in plain Python.

The contract (sglang 0.5.23): the pass first polls every queued request's KV receiver; a request it looks at whose
receiver has failed (prefill reported the failure, or the client's abort aborted the receiver) is aborted, whether or
not the other queued receivers are ready ("Receiver polling observes asynchronous failures while KV allocation is
blocked", ``_update_handshake_waiters``). The pass looks at the queue in its order - priority order when priority
scheduling is on (a stable sort) - and only at the requests in ``rids_to_check`` when it is given. A PP stage's pass
(pipeline parallelism: the decode PP loop's step, 0.5.7 on) is given the stages' consensus instead and polls no receiver
(so every stage applies one outcome: #31869, a fix in 0.5.17 - before it the stage polled its own receivers, T32): it
looks only at the requests in ``pp_good_rids`` or ``pp_bad_rids``, aborts those in ``pp_bad_rids`` and takes those in
``pp_good_rids`` as ready, whatever this stage's receiver says now. Every aborted request it looks at fails: it leaves
the queue, its receiver is released, and its abort is streamed unless it already was. It then admits, first come first
served, the bootstrapped requests that are not aborted; a request whose LoRA adapter would not fit beside the loaded
ones is passed over (it waits, the next may go), and the pass stops at the first request that finds no free metadata
buffer, no free request row, or a token budget short of its need: ``max(its fresh KV pages' tokens + the decode
headroom, tokens prefill sends - its prefix + min(max_new_tokens, clip) - retractable tokens)``. With the radix cache
on, the budget counts the tree's evictable pages (it can free them on demand), and a locked page is not evictable: a
request locks its matched prefix before its budget check ("Matching may lock previously-evictable radix pages, so
refresh the admission budget against the post-lock pool state before we decide whether this request still fits",
``decode.py`` 0.5.11 on), so the budget it is checked against, and every later one, lacks the prefix pages its lock
newly protected (a page another admitted request holds locked already is not counted twice); turned away, it
releases the lock. A request's fresh pages
are those of ``[prefix, fill)`` (its matched device prefix is held already; a rebootstrapped request matches none, and
holds and receives its outputs too). Each device admission takes its fresh pages' tokens from the budget, and the
reserve grows by its headroom: the budget keeps back ``max(headroom x (running + admitted), the largest running
request's min(max_new_tokens, clip) + its tokens - retractable tokens)``. Before the budget was re-read after each
admission (``budget_reread=False``: the pass read it once, to 0.5.10.post1), each device admission took its fresh pages'
tokens and its headroom from it outright. With the device pool's usage at or past the host-receive threshold (below 1),
a host-capable request that is not rebootstrapped goes to host memory instead, before the row and budget checks: it is
admitted when the host pool has its prompt's pages plus the host reserve free, and the pass stops otherwise; it takes
host pages, a metadata buffer, and no row or device budget. With a hybrid SWA pool, a request that fits the budget also
needs the SWA budget for its window tail - ``max(its tail's pages' tokens + the headroom (none with the radix cache
off), its tail + min(max_new_tokens, clip) - the running requests' SWA tails)``; short of it the pass stops. Each
admission takes its tail's pages' tokens from that budget, and its reserve grows as the full side's does, except that
SWA growth is bounded by the sliding window: the SWA budget keeps back ``max(min(headroom x (running + admitted),
window x (running + admitted) - SWA tokens in use), the largest running request's SWA tail + min(max_new_tokens, clip)
- the running requests' SWA tails)`` (the pool's SWA tokens in use: pages 0 to the highest free one, less the free
ones). Before the SWA budget was re-read after each admission (``swa_budget_reread=False``, to 0.5.18) each
admission took its tail's pages' tokens and headroom from it outright. Then it needs SWA pages for the tail: when the
SWA buffer cannot hold them it fails (aborted, streamed, released, its radix lock too) and the pass goes on. The queue
keeps the rest, in order. Afterwards exactly the admitted requests with a matched prefix hold a radix lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdverify.model.queue import CLIP_MAX_NEW_TOKENS, RUNNING_MAX_NEW_TOKENS, DecodeQueueCase


@dataclass(frozen=True)
class ExpectedPass:
    admitted: list[int]
    failed: list[int]
    remaining: list[int]
    streamed: list[int]
    locked: list[int]


def expected_pass(
    case: DecodeQueueCase,
    *,
    budget_reread: bool = True,
    swa_headroom_always: bool = False,
    swa_budget_reread: bool = True,
) -> ExpectedPass:
    """The pass's outcome. ``budget_reread=False``: the budget read once (to 0.5.10.post1); ``swa_headroom_always``:
    the SWA budget charged the decode headroom with the radix cache off too (to 0.5.13.post1, before #28755);
    ``swa_budget_reread=False``: the SWA budget read once and each admission's tail pages and headroom taken from it
    (to 0.5.18)."""
    reqs = case.requests
    ps = case.page_size
    order = list(range(len(reqs)))
    if case.priority_order == "low_first":
        order.sort(key=lambda i: reqs[i].priority)
    elif case.priority_order == "high_first":
        order.sort(key=lambda i: -reqs[i].priority)
    if case.pp_consensus:  # a PP pass looks at the consensus only, and takes its verdicts from it
        looked_at = [i for i in order if reqs[i].consensus in ("good", "bad")]
        handshake_failed = [reqs[i].consensus == "bad" for i in range(len(reqs))]
        ready = [reqs[i].bootstrapped or reqs[i].consensus == "good" for i in range(len(reqs))]
    else:
        looked_at = [i for i in order if reqs[i].checked or not case.restrict]
        handshake_failed = [reqs[i].receiver_failed is not None for i in range(len(reqs))]
        ready = [reqs[i].bootstrapped for i in range(len(reqs))]
    # the handshake: a failed receiver the pass looks at aborts its request (a fresh abort, not yet streamed)
    aborted = [reqs[i].aborted or handshake_failed[i] for i in range(len(reqs))]
    failed = [i for i in looked_at if aborted[i]]
    streamed = [i for i in failed if not reqs[i].abort_streamed]

    # a PP stage's other microbatches hold their adapters too (none outside a PP pass: the case refuses them)
    loaded = {lora for _, lora in case.running} | set(case.microbatch_loras)
    retractable = 0
    for tokens, _ in case.running:
        retractable += tokens
    buffers, rows, budget = case.metadata_buffers, case.request_rows, case.token_budget
    single = 0  # the largest running request's need with every other one retracted
    for tokens, _ in case.running:
        single = max(single, min(RUNNING_MAX_NEW_TOKENS, CLIP_MAX_NEW_TOKENS) + tokens - retractable)

    def reserve(device_admitted: int) -> int:
        return max(case.reserved_decode_tokens * (len(case.running) + device_admitted), single)

    host_free = len(case.host_free_pages) * ps
    swa_free = len(case.swa_free_pages or ())
    swa_budget = case.swa_token_budget
    swa_budget_start = 0 if swa_budget is None else swa_budget

    def span(tokens: int) -> int:  # the SWA tail of ``tokens``: from the page-aligned window start
        reach = max(case.window, ps) + 1 if case.radix else case.window
        return tokens - max(0, tokens - reach) // ps * ps

    swa_retractable = 0
    for tokens, _ in case.running:
        swa_retractable += span(tokens)
    swa_single = 0  # the largest running request's SWA need with every other one retracted
    for tokens, _ in case.running:
        swa_single = max(swa_single, span(tokens) + min(RUNNING_MAX_NEW_TOKENS, CLIP_MAX_NEW_TOKENS) - swa_retractable)
    # the SWA pool is pages 0 .. the highest free one (page 0 pads): the pages not free are in use
    swa_pages_total = 0
    for page in case.swa_free_pages or ():
        swa_pages_total = max(swa_pages_total, page + 1)
    swa_used = (max(swa_pages_total, 1) - swa_free) * ps

    def swa_reserve(device_admitted: int, used: int) -> int:
        """What the SWA budget keeps back: the active requests' decode headroom, at most what their windows can
        still grow, or the largest running request's SWA need."""
        active = len(case.running) + device_admitted
        growth = max(0, active * case.window - used)
        return max(min(case.reserved_decode_tokens * active, growth), swa_single)

    swa_reserve_start = swa_reserve(0, swa_used)
    protected: set[int] = set()  # the radix cache's pages the admitted requests hold locked
    swa_taken = 0  # the SWA pages' tokens this pass took
    admitted: list[int] = []
    on_host = 0
    for i in looked_at:
        r = reqs[i]
        if aborted[i] or not ready[i]:
            continue
        if buffers == 0:
            break
        if case.max_loras is not None and r.lora not in loaded and len(loaded | {r.lora}) > case.max_loras:
            continue
        if case.host_threshold < 1 and r.host_capable and not r.rebootstrap and case.pool_usage >= case.host_threshold:
            tokens = (r.length + ps - 1) // ps * ps
            if host_free < tokens + case.host_reserved_tokens:
                break
            admitted.append(i)
            on_host += 1
            buffers, host_free = buffers - 1, host_free - tokens
            loaded.add(r.lora)
            continue
        if rows == 0:
            break
        outputs = r.output_len if r.rebootstrap else (r.output_len - 1 if r.output_len > 1 else 0)
        fill = r.length + outputs
        sent = r.length + (r.output_len if r.rebootstrap else 0)
        prefix = len(r.prefix_pages) * ps if case.radix and not r.rebootstrap else 0
        tokens = (fill + ps - 1) // ps * ps - prefix
        new = min(r.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        need = max(tokens + case.reserved_decode_tokens, sent - prefix + new - retractable)
        locking = set(r.prefix_pages) - protected if prefix else set()  # what its lock takes out of the evictable
        if need > budget - len(locking) * ps:
            break
        if case.swa_free_pages is not None:
            tail = span(fill)
            swa_pages = (tail + ps - 1) // ps
            swa_required = swa_pages * ps + (case.reserved_decode_tokens if case.radix or swa_headroom_always else 0)
            if swa_budget is not None and max(swa_required, tail + new - swa_retractable) > swa_budget:
                break
            if swa_pages > swa_free:
                failed.append(i)
                streamed.append(i)
                continue
            swa_free -= swa_pages
            swa_taken += swa_pages * ps
            if swa_budget is not None and swa_budget_reread:
                device_after = len(admitted) - on_host + 1
                grown = swa_reserve(device_after, swa_used + swa_taken) - swa_reserve_start
                swa_budget = swa_budget_start - swa_taken - grown
            elif swa_budget is not None:
                swa_budget -= swa_required
        on_device = len(admitted) - on_host
        admitted.append(i)
        buffers, rows = buffers - 1, rows - 1
        if budget_reread:
            budget -= tokens + reserve(on_device + 1) - reserve(on_device)
        else:
            budget -= tokens + case.reserved_decode_tokens
        budget -= len(locking) * ps
        protected |= locking
        loaded.add(r.lora)
    gone = set(admitted) | set(failed)
    locked = [i for i in admitted if case.radix and reqs[i].prefix_pages and not reqs[i].rebootstrap]
    return ExpectedPass(admitted, failed, [i for i in order if i not in gone], streamed, locked)
