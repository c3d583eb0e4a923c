"""Strategies for decode's pre-allocation queue: ``decode_queues`` (one ``pop_preallocated`` pass)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from pdverify.model.layout import pages_needed
from pdverify.model.queue import (
    ALLOCATION_POLICIES,
    CLIP_MAX_NEW_TOKENS,
    PRIORITY_ORDERS,
    RECEIVER_FAILURES,
    RUNNING_MAX_NEW_TOKENS,
    DecodeQueueCase,
    QueuedRequest,
)
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.fields import draw_fields
from pdverify.strategies.layouts import LEAN_PAGES, page_size_list, pick_page_size

ADAPTERS: tuple[str | None, ...] = (None, "a", "b", "c")
"""The LoRA adapters requests draw from (None: the base model, which counts as an adapter in a batch)."""


def decode_queues(
    *, max_requests: int = 5, max_length: int = 32, max_page_size: int = 16
) -> st.SearchStrategy[DecodeQueueCase]:
    """One pass of decode's pre-allocation queue: a page size; ``1..max_requests`` queued requests, each with a prompt
    of ``1..max_length`` tokens, 0..3 output tokens and a ``max_new_tokens``, bootstrapped or still waiting for its
    receiver, aborted (its abort streamed already or not) or live, its receiver failed (prefill reported the failure, or
    the client's abort aborted it) or not, rebootstrapped or first-time (each of the four rarities switched off for a
    whole pass half the time: swarm testing); FIFO or priority scheduling (either order, priorities 0..3 with ties);
    LoRA off or on with 1..3 adapter slots and each request on the base model or one of three adapters; the whole queue
    looked at, only a ``rids_to_check`` subset or - a PP pass (0.5.17 on) - the stages' consensus (``_consensus``; the
    restricted pass from 0.5.17) and the adapters of 0..2 requests running in its other microbatch; 0..2 running
    requests (retractable tokens, loaded adapters); a decode headroom; free metadata buffers and request rows from none
    to one per request; free pages in a fragmented order and a token budget from 0 to all of them - in half the passes
    exactly the first requests' fresh pages and headroom or one token less; in half the passes of the device path
    without the radix cache (page size > 1; radix off, or a rebootstrapped request), exactly the fresh pages of the
    requests the pass reaches before one and that one's charge (its raw length on that path) and headroom, with running
    requests covering the output room; host receive off or on (host pages for the prompts and the reserve less a
    shortfall, or in half the passes with a reserve one page short of a host-bound request's prompt and reserve). Within
    the bound release's input domain: no failed receiver where decode raises on one (input feature
    ``handshake_failure_abort``), no aborted receiver before the scheduler's abort handler aborts one
    (``prealloc_receiver_abort``), no radix cache before 0.5.11, no rebootstrap before 0.5.16, no PP consensus before
    0.5.17, no host receive before 0.5.21, the early policy before 0.5.22. Shortfalls shrink to none: the simplest pass
    admits every live bootstrapped request. The first choice is a lean (``Choices.lean``): under one, the simplest pass
    has three requests of three pages on a page size above 1, with priorities, LoRA, staging and running requests on.
    Leans 1 and 2 add radix prefixes - lean 1 a rebootstrapped first request, a hybrid SWA pool one page short of the
    last locked request's tail and a token budget one token short; lean 2 a token budget at the boundary of the first
    request. Lean 3 adds host receive instead: the second request device-bound between two host-bound ones, the request
    rows exactly the device-bound requests' and the host pool one page short of the last host-bound request's reserve.
    Lean 4 adds a decode headroom, radix prefixes (where the release takes them with an SWA pool) and a hybrid SWA pool
    whose SWA budget is one token short of the last live request's SWA admission test after the others' page-aligned
    charges, the prompts one token past three pages (SWA tails that end inside a page)."""
    check_int("max_requests", max_requests, minimum=1)
    check_int("max_length", max_length, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    return _decode_queues(max_requests=max_requests, max_length=max_length, max_page_size=max_page_size)


@st.composite
def _decode_queues(draw: st.DrawFn, *, max_requests: int, max_length: int, max_page_size: int) -> DecodeQueueCase:
    c = Choices(draw)
    c.lean(4)
    return draw_decode_queue(c, max_requests=max_requests, max_length=max_length, max_page_size=max_page_size)


def _shortfall(c: Choices, most: int, *, lean: tuple[int, ...] = ()) -> int:
    """None half the time (shrinks to none; under the leans in ``lean`` to one), else ``0..most``."""
    return c.integer(0, most, lean=1) if c.boolean(lean=lean) else 0


def draw_decode_queue(c: Choices, *, max_requests: int, max_length: int, max_page_size: int) -> DecodeQueueCase:
    """``decode_queues``' example, drawn from ``c``."""
    # pages of more than one token came with paged transfer (#5561, 0.4.5.post2): drawn, then 1 before it
    ps = pick_page_size(c, page_size_list(max_page_size))
    ps = ps if DOMAIN.has("paged_transfer") else 1
    k = c.integer(1, max_requests, lean=3)
    # priority scheduling came in 0.5.3 (#8746): drawn, then dropped before it (the draws after it stay in place)
    order = c.pick(PRIORITY_ORDERS) if c.boolean(lean=True) else None
    order = order if DOMAIN.has("priority_scheduling") else None
    max_loras = c.integer(1, 3) if c.boolean(lean=True) else None
    # a restricted pass: a PP stage's step given the stages' consensus (the decode PP loop, #14945, 0.5.7), or the
    # pass given rids_to_check - what that step made of the consensus to 0.5.16, half the time where a caller still
    # makes it (none from 0.5.17, #31869: outside those releases' domain, releases.UNMADE_FROM)
    checked_pass = c.boolean()
    pp = checked_pass and DOMAIN.has("pp_consensus") and (not DOMAIN.has("rids_to_check") or c.boolean())
    restrict = checked_pass and not pp and DOMAIN.has("rids_to_check")
    # the allocation policy first: the server refuses prefill_complete with the decode radix cache, host receive
    # or staging buffers (SGLang's own validation, _validate_prefill_complete), so those are drawn only without it
    policy = c.pick(ALLOCATION_POLICIES) if DOMAIN.allocation_policy else "early"
    complete = policy == "prefill_complete"
    # lean 4 is about the SWA budget: it leans to the radix cache only where the release takes it with an SWA pool
    swa_radix = DOMAIN.has("swa_decode_prefix")
    # decode's radix cache came in 0.5.11
    radix = not complete and c.boolean(lean=(1, 2, 4) if swa_radix else (1, 2)) and DOMAIN.decode_prefix
    # swarm switches: each per-request rarity is possible in only half the passes, so that a pass of k live,
    # bootstrapped, first-time requests - the one that reaches the deep verdicts (host receive, SWA tails) - is not
    # drowned by a rarity in one of its k requests
    aborts, waits = c.boolean(lean=True), c.boolean(lean=True)
    # a KV receiver that failed while its request is queued: prefill reported the failure (every release whose
    # decode aborts the request rather than raising), or the client's abort aborted the receiver (where the
    # scheduler's AbortReq handler does that)
    failures = c.boolean() and DOMAIN.has("handshake_failure_abort")
    forms = tuple(f for f in RECEIVER_FAILURES if f == "peer" or DOMAIN.has("prealloc_receiver_abort"))
    # the prefill_complete policy changes only what happens to a rebootstrapped request: a pass under it has them on
    rebootstraps = (c.boolean(lean=True) or complete) and DOMAIN.rebootstrap  # 0.5.16 on
    requests = []
    for i in range(k):
        aborted = aborts and c.integer(0, 3) == 3  # one in four where aborts are on; shrinks to live
        # under a lean three pages at, one short of or one past the boundary: at it (lean 1), a rebootstrapped
        # request's output spills into a page of its own
        length = c.integer(1, max_length, lean=LEAN_PAGES * ps + (0, -1, 1, 1)[c.leaning - 1])
        output_len = c.integer(0, 3, lean=1)  # drawn first whatever it becomes: the draws after it stay in place
        request = _first_time_output(
            length=length,
            output_len=output_len,
            max_new_tokens=c.integer(1, 32),
            bootstrapped=not (waits and c.integer(0, 3) == 3),
            aborted=aborted,
            # an abort already streamed sits in the queue only with true retraction (#25372, 0.5.16 on)
            abort_streamed=aborted and c.boolean() and DOMAIN.rebootstrap,
            priority=c.integer(0, 3) if order else 0,
            lora=c.pick(ADAPTERS) if max_loras else None,
            checked=c.integer(0, 3) != 3 if restrict else True,
            # how many of the adapter's common prefix pages it holds (the pages themselves: cached_prefix, below)
            prefix_pages=tuple(range(1, 1 + c.integer(0, length // ps, lean=1))) if radix else (),
            # lean 1: the first request rebootstrapped (it must match no radix prefix)
            rebootstrap=rebootstraps and c.integer(0, 3, lean=3 if c.leaning == 1 and i == 0 else None) == 3,
            # lean 3: the second request device-bound, between two host-bound ones
            host_capable=c.boolean(lean=(1, 2) if i == 1 else True),
            receiver_failed=c.pick(forms) if failures and c.integer(0, 3) == 3 else None,
            extra=draw_fields(c),
        )
        request = replace(request, prefix_pages=cached_prefix(request.lora, len(request.prefix_pages)))
        requests.append(replace(request, consensus=_consensus(c, request)) if pp else request)
    running = tuple((c.integer(1, 64), c.pick(ADAPTERS) if max_loras else None) for _ in range(c.integer(0, 2, lean=1)))
    reserved = c.integer(0, 8, lean=1 if c.leaning == 4 else None)  # lean 4: a headroom the SWA budget charges
    pool = sum(pages_needed(r.fill_len, ps) for r in requests) + pages_needed(32 + 8, ps) + c.integer(0, 2)
    cap = pool * ps
    case = DecodeQueueCase(
        page_size=ps,
        requests=tuple(requests),
        free_pages=tuple(distinct_sample(c, 1, pool + 32, pool)),
        metadata_buffers=k - _shortfall(c, k),
        request_rows=k - _shortfall(c, k),
        token_budget=cap - _shortfall(c, cap, lean=(1,)),
        reserved_decode_tokens=reserved,
        running=running,
        priority_order=order,
        max_loras=max_loras,
        # a PP stage's other microbatch: its running requests' adapters (LoRA on; 0..2, shrinks to none)
        microbatch_loras=tuple(c.pick(ADAPTERS) for _ in range(c.integer(0, 2))) if pp and max_loras else (),
        restrict=restrict,
        pp_consensus=pp,
        radix=radix,
        staging=not complete and c.boolean(lean=True) and DOMAIN.has("staging_buffer"),  # #19890, 0.5.10
        allocation_policy=policy,
        # host receive came in 0.5.21 (#40238): a release before it never draws it
        **({} if complete or not DOMAIN.has("host_receive") else _host_receive(c, requests, ps, radix)),
    )
    if case.host_threshold < 1.0 and c.boolean(lean=True):  # drawn last: earlier choices keep their meaning
        # a boundary: exactly the rows the device-bound requests need, so a host-received request that took a row
        # would leave a later one without (rows are no contract, their count is)
        case = replace(case, request_rows=sum(1 for i in range(k) if not case.to_host(i)))
    if case.host_reserved_tokens and c.boolean(lean=True):  # half the passes with a reserve
        case = _host_short_of_reserve(c, case)
    # a hybrid SWA model with the decode radix cache: accepted from 0.5.19 (refused before)
    swa_ok = not case.radix or swa_radix
    tails = DOMAIN.has("swa_tail_prealloc")  # before #24857 a hybrid SWA request takes its whole sequence there
    growing = False
    if ps > 1 and case.host_threshold == 1.0 and swa_ok and tails and c.boolean(lean=(1, 4)):
        # a quarter of the SWA passes have windows that can still grow (see _growing_windows)
        growing = c.integer(0, 3) == 3 and DOMAIN.has("swa_budget_reread")
        case = _with_swa_pool(c, _growing_windows(c, case) if growing else case, growing=growing)
    # (a full-side boundary would stop a growing-window pass before its SWA budget decides it)
    if not growing and c.boolean(lean=(2,)):
        case = _tight_budget(c, case)
    bypass = [not case.radix or r.rebootstrap for r in case.requests]  # the device path without the radix cache
    # (not under lean 1, whose rebootstrapped first request would stop the pass before its locked SWA tails)
    if (
        ps > 1
        and any(bypass)
        and case.host_threshold == 1.0
        and not growing
        and c.boolean(lean=() if case.radix else (1, 2, 3))
    ):
        # a boundary of the device path without the radix cache (radix off, or a rebootstrapped request, which never
        # matches decode's tree): a budget of exactly what the first j - 1 requests take (their fresh pages, and on the
        # radix path the pages their locks protect) and request j's charge and headroom - its raw fill length on that
        # path, its fresh pages on the radix path - where charging a request by its tokens and allocating it whole pages
        # part ways (T3), with running requests whose retractable tokens cover every request's output room, so that the
        # raw-length term of the admission test is the one that binds (without it the generator had reached T3 once in
        # 116 examples, on one release's draws only; charging the earlier requests their raw lengths too left their page
        # rounding to stop the pass before request j: 18 of 1000 examples allocated past the budget)
        # counted over the requests the pass reaches (live, in its order, within the free buffers and rows)
        live = _reached(case)[: min(case.metadata_buffers, case.request_rows)] or [0]
        at = c.integer(0, len(live) - 1)
        fresh = [
            (pages_needed(r.fill_len, ps) - (0 if bypass[i] else len(r.prefix_pages))) * ps
            for i, r in enumerate(case.requests)
        ]
        j = live[at]
        charge = case.requests[j].fill_len if bypass[j] else fresh[j]
        locked = {p for i in live[: at + 1] if not bypass[i] for p in case.requests[i].prefix_pages}
        raw = sum(fresh[i] for i in live[:at]) + charge + len(locked) * ps + case.reserved_decode_tokens
        room = max(r.max_new_tokens for r in case.requests)
        running = case.running if case.retractable_tokens >= room else ((room, None), *case.running)[:2]
        case = replace(case, token_budget=min(raw, case.token_budget), running=running)
    return case


def cached_prefix(lora: str | None, pages: int) -> tuple[int, ...]:
    """The first ``pages`` pages of the common prefix the decode radix cache holds for requests of adapter ``lora``:
    the tree keys a prefix by the request's adapter too (``Req.extra_key`` holds the LoRA id), so requests of one
    adapter share its pages and requests of two never do."""
    start = 10_000 + 1_000 * ADAPTERS.index(lora)
    return tuple(range(start, start + pages))


def _first_time_output(**fields: Any) -> QueuedRequest:
    """A queued request whose output is its own only when rebootstrapped: a first-time request enters the queue
    before prefill's first token (a retracted one resumes through ``retracted_queue``), so it holds at most the one
    output token the fill length leaves out."""
    if not fields["rebootstrap"]:
        fields["output_len"] = min(fields["output_len"], 1)
    return QueuedRequest(**fields)


def _tight_budget(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase:
    """A boundary: a token budget of exactly the fresh pages' tokens of the first ``j`` requests (in arrival order),
    the radix cache's pages their locks protect (the budget counts them while evictable) and the decode headroom, or
    one token less - where a request is turned away for memory holding a radix lock, charged for a prefix it holds,
    checked against the budget from before its own lock, or admitted without its headroom (a uniform budget lands on
    it about once in the pool's size)."""
    ps, k = case.page_size, len(case.requests)
    j = c.integer(1, k, lean=1)
    if case.radix and c.boolean() and (shared := _shared_lock_boundary(c, case)) is not None:
        return shared
    fresh = 0
    locked: set[int] = set()  # the radix cache's pages their locks take out of the budget's evictable part
    for r in case.requests[:j]:
        fill = r.length + (r.output_len if r.rebootstrap else max(r.output_len - 1, 0))
        held = len(r.prefix_pages) if case.radix and not r.rebootstrap else 0
        fresh += (pages_needed(fill, ps) - held) * ps
        locked |= set(r.prefix_pages[:held])
    budget = max(0, fresh + len(locked) * ps + case.reserved_decode_tokens - c.integer(0, 1))
    return replace(case, token_budget=min(budget, case.token_budget))


def _shared_lock_boundary(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase | None:
    """A boundary where two admitted requests lock the same radix pages (a page two locks hold leaves the budget
    once): the budget request ``j`` is checked against - what the requests before it took (their fresh pages, the
    pages their locks and its own protect, the headroom their admissions add to what is kept back) - equal to its
    need, or one token short, with a running request whose retractable tokens cover every request's output room (so
    that the pages, not the output room, bind). ``j`` is a request the pass reaches whose matched prefix shares pages
    with an earlier one's; None where there is none, or where a request before it would stop the pass first (a
    uniform budget lands on this about once in 500 radix passes)."""
    ps, reqs = case.page_size, case.requests
    if case.host_threshold < 1:  # host receive takes requests off the device budget
        return None
    room = max(r.max_new_tokens for r in reqs)
    # the added running request loads no adapter the pass would not have loaded anyway
    adapters = [lora for _, lora in case.running] + list(case.microbatch_loras) + [r.lora for r in reqs]
    adapter = adapters[0]
    running = case.running if case.retractable_tokens >= room else ((room, adapter), *case.running)[:2]
    loaded = {lora for _, lora in running} | set(case.microbatch_loras)
    reached = []
    for i in _reached(case):  # less those whose adapter does not fit (passed over), within the buffers and rows
        if case.max_loras is None or len(loaded | {reqs[i].lora}) <= case.max_loras:
            reached.append(i)
            loaded.add(reqs[i].lora)
    reached = reached[: min(case.metadata_buffers, case.request_rows)]
    matching = [i for i in reached if not reqs[i].rebootstrap and reqs[i].length >= ps]
    if sum(1 for i in matching if reqs[i].prefix_pages) < 2 and case.swa_free_pages is None:
        # too few prefixes to share (a drawn prefix is empty a third of the time): each request that can match one
        # gets one of the common prefix's pages (an SWA pool keeps its drawn ones: its window tails cap them)
        given = list(reqs)
        for i in matching:
            pages = reqs[i].prefix_pages or cached_prefix(reqs[i].lora, c.integer(1, reqs[i].length // ps))
            given[i] = replace(reqs[i], prefix_pages=pages)
        case = replace(case, requests=tuple(given))
        reqs = case.requests
    held = [set(reqs[i].prefix_pages) if case.prefix_len(i) else set() for i in reached]
    positions = [at for at in range(1, len(reached)) if any(held[at] & h for h in held[:at])]
    if not positions:
        return None
    at = c.pick(positions)
    retractable = sum(t for t, _ in running)
    single = max((min(RUNNING_MAX_NEW_TOKENS, CLIP_MAX_NEW_TOKENS) + t - retractable for t, _ in running), default=0)

    def kept(admitted: int) -> int:
        return max(case.reserved_decode_tokens * (len(running) + admitted), single)

    def fresh(i: int) -> int:
        return pages_needed(reqs[i].fill_len, ps) * ps - case.prefix_len(i)

    def need(i: int) -> int:
        output_room = min(reqs[i].max_new_tokens, CLIP_MAX_NEW_TOKENS)
        return max(
            fresh(i) + case.reserved_decode_tokens, reqs[i].prefill_len - case.prefix_len(i) + output_room - retractable
        )

    def at_check(p: int) -> int:  # the budget that lets request reached[p] in exactly, all before it admitted
        locked = set().union(*held[: p + 1])
        return need(reached[p]) + sum(fresh(i) for i in reached[:p]) + len(locked) * ps + kept(p) - kept(0)

    budget = at_check(at) - c.integer(0, 1)
    if any(at_check(p) > budget for p in range(at)):
        return None
    return replace(case, token_budget=min(case.token_budget, max(0, budget)), running=running)


def _growing_windows(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase:
    """A pass whose SWA budget's headroom term binds (0.5.19 on, where the budget is re-read after each admission
    and keeps back the active requests' headroom only as far as their windows can still grow): no running request
    (whose SWA need would outweigh the headroom) and a window past every request's fill, so that each tail is the
    whole request and each window can still grow (a uniform draw met the two SWA budget forms' difference in 3 of
    948 SWA passes with an SWA budget), every request live. ``_with_swa_pool`` then takes the window and the lowest
    free pages, and ``_swa_budget`` a boundary of the re-read form."""
    window = max(r.fill_len for r in case.requests) + case.page_size + c.integer(0, 64)
    # every request live and ready, so that some are admitted before the SWA budget decides
    ready: dict[str, Any] = {"aborted": False, "abort_streamed": False, "bootstrapped": True, "receiver_failed": None}
    ready["checked"], ready["consensus"] = True, "good" if case.pp_consensus else None
    live = tuple(replace(r, **ready) for r in case.requests)
    return replace(case, requests=live, running=(), window=window)


def _with_swa_pool(c: Choices, case: DecodeQueueCase, *, growing: bool = False) -> DecodeQueueCase:
    """The case on a hybrid SWA pool: a window, outputs of at most one token (as prefill hands requests over;
    rebootstrapped ones keep theirs), prefixes that stop before each SWA tail, and an SWA budget (``_swa_budget``).
    With the radix cache, half the time (under lean 1 always) the budget counts the cache's evictable SWA pages
    (None), and SWA pages for all the tails but a shortfall (shrinks to none), or - where a request holds a radix
    prefix, half the time - one page short of that request's tail: the reclaim before pre-allocation decides. Else
    SWA pages for the tails and each request's growth room (its ``max_new_tokens`` and the headroom, which admission's
    SWA test reserves) less a shortfall."""
    # half the windows are short (up to two pages): only then does a radix prefix stop before the SWA tail, so a
    # request that fails for its tail can hold a lock (the generation-only measurement found that combination unreached)
    ps = case.page_size
    window = c.integer(1, 2 * ps) if c.boolean(lean=True) else c.integer(1, 40)
    window = case.window if growing else window  # drawn all the same: the draws after it stay in place
    reach = max(window, ps) + 1 if case.radix else window
    requests, tails = [], []
    for r in case.requests:
        tail = r.fill_len - max(0, r.fill_len - reach) // ps * ps
        prefix = (r.fill_len - tail) // ps if case.radix and not r.rebootstrap else len(r.prefix_pages)
        requests.append(replace(r, prefix_pages=r.prefix_pages[:prefix]))
        tails.append(pages_needed(tail, ps))
    need = sum(tails)
    evictable = case.radix and c.boolean(lean=(1,)) and not growing
    locked = [j for j, r in enumerate(requests) if r.prefix_pages and tails[j] and not r.rebootstrap]
    if evictable and locked and c.boolean(lean=True):
        # a boundary: one page short of the tail of a request that holds a radix prefix (the requests before it
        # served), the shortfall that makes a locked request fail for its tail - a uniform one rarely does
        j = c.pick(locked, lean=len(locked) - 1)  # under a lean the last: those before it are served
        count = sum(tails[:j]) + tails[j] - 1
    elif evictable:
        count = need - _shortfall(c, need)
    else:
        # room for growth too: pages for the tails alone fail admission's SWA test for nearly every request
        grow = min(CLIP_MAX_NEW_TOKENS, max((r.max_new_tokens for r in requests), default=0))
        count = need + pages_needed(grow + case.reserved_decode_tokens, ps) * len(requests)
        count -= _shortfall(c, count)
    # growing windows: the buffer's lowest pages free (only the padding page in use), else scattered above pages in use
    pages = tuple(distinct_sample(c, 1, count + (0 if growing else 32), count))
    full = count * ps  # all of the free SWA buffer first, so that the case is valid to draw the budget from
    case = replace(case, requests=tuple(requests), swa_free_pages=pages, window=window, swa_token_budget=full)
    return replace(case, swa_token_budget=None if evictable else _swa_budget(c, case, reread=growing))


def _consensus(c: Choices, r: QueuedRequest) -> str | None:
    """A request's place in a PP pass's consensus: as its state says three times in four - bad when aborted (the
    scheduler routes aborts to the bad list) or its receiver failed, good when its receiver is ready (an earlier pass
    saw it, or half the time the stages saw it ready just now), else in neither list - and once in four any of the
    three: the stages agreed before the pass, and a receiver may fail or an abort arrive in between (shrinks to the
    first)."""
    if c.integer(0, 3) == 3:
        return c.pick((None, "good", "bad"))
    if r.aborted or r.receiver_failed is not None:
        return "bad"
    return "good" if r.bootstrapped or c.boolean() else None


def _reached(case: DecodeQueueCase) -> list[int]:
    """The requests a pass would reach, in its order: live (not aborted, their handshake not failed), ready and
    looked at (a boundary counted over requests it passes over lands nowhere)."""
    reqs = case.requests
    live = [
        i
        for i, r in enumerate(reqs)
        if case.ready(i) and not r.aborted and not case.handshake_failed(i) and case.looked_at(i)
    ]
    if case.priority_order is not None:
        sign = 1 if case.priority_order == "low_first" else -1
        live.sort(key=lambda i: reqs[i].priority * sign)
    return live


def _swa_budget(c: Choices, case: DecodeQueueCase, *, reread: bool = False) -> int:
    """An SWA budget within the free SWA buffer: all of it less a shortfall (shrinks to none), or half the time
    (under lean 4 always) a boundary - exactly the first ``j`` requests' SWA charges (their tails' pages and
    headroom) with request ``j`` (shrinks to the last live one) at its admission test less one token (shrinks to
    that), or exactly."""
    cap = len(case.swa_free_pages or ()) * case.page_size
    if not (reread or c.boolean(lean=(4,))):
        return cap - _shortfall(c, cap)
    live = _reached(case)
    if reread:  # the requests the pass admits before its SWA budget decides: within the free buffers and rows
        live = live[: min(case.metadata_buffers, case.request_rows)]
    if not live:
        return cap
    # shrinks to the last: every request before it admitted (re-read: at least one, whose headroom it keeps back)
    at = len(live) - 1 - c.integer(0, len(live) - (2 if reread and len(live) > 1 else 1))
    j = live[at]
    room = min(case.requests[j].max_new_tokens, CLIP_MAX_NEW_TOKENS)
    need = max(case.swa_required(j), case.swa_tail_len(j) + room - case.retractable_swa_tokens)
    if reread:  # the tails' pages taken and what the re-read budget keeps back for the admitted requests
        taken = sum(pages_needed(case.swa_tail_len(i), case.page_size) * case.page_size for i in live[:at])
        charged = taken + case.swa_kept_back(at, taken) - case.swa_kept_back(0, 0)
    else:  # read once (to 0.5.18): each admission charged its tail's pages and its headroom
        charged = sum(case.swa_required(i) for i in live[:at])
    return max(0, min(cap, charged + need - 1 + c.integer(0, 1)))  # shrinks to one token short


def _host_short_of_reserve(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase:
    """A boundary: host pages for the host-bound requests' prompts up to one of them (the first; under a lean the
    last) and all of the reserve but one page, so that the requests before it are received into host memory and
    its prompt fits while only the reserve refuses it (a uniform shortfall lands inside the reserve about once in
    ``need`` passes; the generation-only measurement found an admission without the reserve killed on 2 of 3
    seeds). Unchanged where no request is host-bound."""
    bound = [
        i
        for i, r in enumerate(case.requests)
        if case.to_host(i) and case.ready(i) and not r.aborted and not case.handshake_failed(i) and case.looked_at(i)
    ]
    if not bound:
        return case
    ps = case.page_size
    upto = bound[: c.integer(0, len(bound) - 1, lean=len(bound) - 1) + 1]
    prompts = sum(pages_needed(case.requests[i].length, ps) for i in upto)
    count = prompts + pages_needed(case.host_reserved_tokens, ps) - 1
    return replace(case, host_free_pages=tuple(distinct_sample(c, 1, count + 32, count)))


def _host_receive(c: Choices, requests: list[QueuedRequest], ps: int, radix: bool) -> dict[str, Any]:
    """Host receive off, or on with a host reserve, a threshold, the device pool's usage above, at or below it and
    host pages for all of the host-capable requests' prompts and the reserve, less a shortfall."""
    if radix or c.integer(0, 2, lean=1) == 0:  # on in two of three passes without the radix cache
        return {}
    reserve = c.integer(0, 2 * ps, lean=ps)
    # enough host pages for every host-capable prompt and its reserve, less a shortfall (shrinks to none): a
    # uniform count left the host pool short in most passes, so a host admission was rare
    need = sum(pages_needed(r.length, ps) for r in requests if r.host_capable) + pages_needed(reserve, ps)
    host = need - _shortfall(c, need)
    threshold = (0.5, 0.8, 0.95)[c.integer(0, 2)]
    return {
        "host_threshold": threshold,
        "pool_usage": threshold + (0.05, 0.0, -0.1)[c.integer(0, 2)],  # above, exactly at (``>=``), below
        "host_free_pages": tuple(distinct_sample(c, 1, host + 32, host)),
        "host_reserved_tokens": reserve,
    }
