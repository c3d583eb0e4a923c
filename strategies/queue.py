"""Strategies for decode's pre-allocation queue: ``decode_queues`` (one ``pop_preallocated`` pass)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from pdverify.model.layout import pages_needed
from pdverify.model.queue import ALLOCATION_POLICIES, PRIORITY_ORDERS, DecodeQueueCase, QueuedRequest
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_int
from pdverify.strategies.fields import draw_fields
from pdverify.strategies.layouts import page_size_list

ADAPTERS: tuple[str | None, ...] = (None, "a", "b", "c")
"""The LoRA adapters requests draw from (None: the base model, which counts as an adapter in a batch)."""


def decode_queues(
    *, max_requests: int = 5, max_length: int = 32, max_page_size: int = 16
) -> st.SearchStrategy[DecodeQueueCase]:
    """One pass of decode's pre-allocation queue: a page size; ``1..max_requests`` queued requests, each with a
    prompt of ``1..max_length`` tokens, 0..3 output tokens and a ``max_new_tokens``, bootstrapped or still
    waiting for its receiver, aborted (its abort streamed already or not) or live, rebootstrapped or first-time
    (each of the three rarities switched off for a whole pass half the time: swarm testing); FIFO or priority scheduling
    (either order, priorities 0..3 with ties); LoRA off or on with 1..3 adapter slots and each request on the base
    model or one of three adapters; the whole queue looked at or only a ``rids_to_check`` subset; 0..2 running
    requests (retractable tokens, loaded adapters); a decode headroom; free metadata buffers and request rows
    from none to one per request; free pages in a fragmented order and a token budget from 0 to all of them - in
    half the passes of the device path without the radix cache (page size > 1), exactly the first requests' raw
    lengths and headroom, with running requests covering the output room; host receive off or on (host pages for
    the prompts and the reserve less a shortfall, or in a quarter of the passes with a reserve one page short of the
    first host-bound prompt plus its reserve). Within the bound release's input domain: no radix cache before 0.5.11,
    no rebootstrap before 0.5.16, no host receive before 0.5.21, the early policy before 0.5.22. Shortfalls shrink
    to none: the simplest pass admits every live bootstrapped request."""
    check_int("max_requests", max_requests, minimum=1)
    check_int("max_length", max_length, minimum=1)
    check_int("max_page_size", max_page_size, minimum=1)
    return _decode_queues(max_requests=max_requests, max_length=max_length, max_page_size=max_page_size)


@st.composite
def _decode_queues(draw: st.DrawFn, *, max_requests: int, max_length: int, max_page_size: int) -> DecodeQueueCase:
    return draw_decode_queue(
        Choices(draw), max_requests=max_requests, max_length=max_length, max_page_size=max_page_size
    )


def _shortfall(c: Choices, most: int) -> int:
    """None half the time (shrinks to none), else ``0..most``."""
    return c.integer(0, most) if c.boolean() else 0


def draw_decode_queue(c: Choices, *, max_requests: int, max_length: int, max_page_size: int) -> DecodeQueueCase:
    """``decode_queues``' example, drawn from ``c``."""
    ps = c.pick(page_size_list(max_page_size))
    k = c.integer(1, max_requests)
    order = c.pick(PRIORITY_ORDERS) if c.boolean() else None
    max_loras = c.integer(1, 3) if c.boolean() else None
    restrict = c.boolean()
    # the allocation policy first: the server refuses prefill_complete with the decode radix cache, host receive
    # or staging buffers (SGLang's own validation, _validate_prefill_complete), so those are drawn only without it
    policy = c.pick(ALLOCATION_POLICIES) if DOMAIN.allocation_policy else "early"
    complete = policy == "prefill_complete"
    radix = not complete and c.boolean() and DOMAIN.decode_prefix  # decode's radix cache came in 0.5.11
    shared = list(range(10_000, 10_000 + max_length // ps + 1))  # the radix cache's pages of a common prefix
    # swarm switches: each per-request rarity is possible in only half the passes, so that a pass of k live,
    # bootstrapped, first-time requests - the one that reaches the deep verdicts (host receive, SWA tails) - is not
    # drowned by a rarity in one of its k requests
    aborts, waits, rebootstraps = c.boolean(), c.boolean(), c.boolean() and DOMAIN.rebootstrap  # 0.5.16 on
    requests = []
    for _ in range(k):
        aborted = aborts and c.integer(0, 3) == 3  # one in four where aborts are on; shrinks to live
        length = c.integer(1, max_length)
        requests.append(
            QueuedRequest(
                length=length,
                output_len=c.integer(0, 3),
                max_new_tokens=c.integer(1, 32),
                bootstrapped=not (waits and c.integer(0, 3) == 3),
                aborted=aborted,
                abort_streamed=aborted and c.boolean(),
                priority=c.integer(0, 3) if order else 0,
                lora=c.pick(ADAPTERS) if max_loras else None,
                checked=c.integer(0, 3) != 3 if restrict else True,
                prefix_pages=tuple(shared[: c.integer(0, length // ps)]) if radix else (),
                rebootstrap=rebootstraps and c.integer(0, 3) == 3,
                host_capable=c.boolean(),
                extra=draw_fields(c),
            )
        )
    running = tuple((c.integer(1, 64), c.pick(ADAPTERS) if max_loras else None) for _ in range(c.integer(0, 2)))
    reserved = c.integer(0, 8)
    pool = sum(pages_needed(r.fill_len, ps) for r in requests) + pages_needed(32 + 8, ps) + c.integer(0, 2)
    cap = pool * ps
    case = DecodeQueueCase(
        page_size=ps,
        requests=tuple(requests),
        free_pages=tuple(distinct_sample(c, 1, pool + 32, pool)),
        metadata_buffers=k - _shortfall(c, k),
        request_rows=k - _shortfall(c, k),
        token_budget=cap - _shortfall(c, cap),
        reserved_decode_tokens=reserved,
        running=running,
        priority_order=order,
        max_loras=max_loras,
        restrict=restrict,
        radix=radix,
        staging=not complete and c.boolean(),
        allocation_policy=policy,
        # host receive came in 0.5.21 (#40238): a release before it never draws it
        **({} if complete or not DOMAIN.has("host_receive") else _host_receive(c, requests, ps, radix)),
    )
    if case.host_threshold < 1.0 and c.boolean():  # drawn last: earlier choices keep their meaning
        # a boundary: exactly the rows the device-bound requests need, so a host-received request that took a row
        # would leave a later one without (rows are no contract, their count is)
        case = replace(case, request_rows=sum(1 for i in range(k) if not case.to_host(i)))
    if case.host_reserved_tokens and c.integer(0, 3) == 3:
        case = _host_short_of_reserve(c, case)
    if ps > 1 and case.host_threshold == 1.0 and c.boolean():
        case = _with_swa_pool(c, case)
    if ps > 1 and not case.radix and case.host_threshold == 1.0 and c.boolean():
        # a boundary of the device path without the radix cache: a budget of exactly the first j requests' raw
        # lengths and headroom - where charging a request by its tokens and allocating it whole pages part ways
        # (T3) - with running requests whose retractable tokens cover every request's output room, so that the
        # raw-length term of the admission test is the one that binds (without it the generator had reached T3 once
        # in 116 examples, on one release's draws only)
        j = c.integer(1, k)
        raw = sum(case.requests[i].fill_len + case.reserved_decode_tokens for i in range(j))
        room = max(r.max_new_tokens for r in case.requests)
        running = case.running if case.retractable_tokens >= room else ((room, None), *case.running)[:2]
        case = replace(case, token_budget=min(raw, case.token_budget), running=running)
    return case


def _with_swa_pool(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase:
    """The case on a hybrid SWA pool: a window, outputs of at most one token (as prefill hands requests over;
    rebootstrapped ones keep theirs), prefixes that stop before each SWA tail, and SWA pages for all the tails
    but a shortfall (shrinks to none), or - where a request holds a radix prefix, half the time - one page short
    of that request's tail."""
    # half the windows are short (up to two pages): only then does a radix prefix stop before the SWA tail, so a
    # request that fails for its tail can hold a lock (the generation-only measurement found that combination unreached)
    ps = case.page_size
    window = c.integer(1, 2 * ps) if c.boolean() else c.integer(1, 40)
    reach = max(window, ps) + 1 if case.radix else window
    requests, tails = [], []
    for r in case.requests:
        r = replace(r, output_len=r.output_len if r.rebootstrap else min(r.output_len, 1))
        tail = r.fill_len - max(0, r.fill_len - reach) // ps * ps
        prefix = (r.fill_len - tail) // ps if case.radix and not r.rebootstrap else len(r.prefix_pages)
        requests.append(replace(r, prefix_pages=r.prefix_pages[:prefix]))
        tails.append(pages_needed(tail, ps))
    need = sum(tails)
    locked = [j for j, r in enumerate(requests) if r.prefix_pages and tails[j]]
    if locked and c.boolean():
        # a boundary: one page short of the tail of a request that holds a radix prefix (the requests before it
        # served), the shortfall that makes a locked request fail for its tail - a uniform one rarely does
        j = c.pick(locked)
        count = sum(tails[:j]) + tails[j] - 1
    else:
        count = need - _shortfall(c, need)
    pages = tuple(distinct_sample(c, 1, count + 32, count))
    return replace(case, requests=tuple(requests), swa_free_pages=pages, window=window)


def _host_short_of_reserve(c: Choices, case: DecodeQueueCase) -> DecodeQueueCase:
    """A boundary: host pages for the first host-bound request's prompt and all of its reserve but one page, so
    that the prompt fits and only the reserve refuses it (a uniform shortfall lands inside the reserve about once
    in ``need`` passes; the generation-only measurement found an admission without the reserve killed on 2 of 3
    seeds). Unchanged where no request is host-bound."""
    first = next((i for i, r in enumerate(case.requests) if case.to_host(i) and r.bootstrapped and not r.aborted), None)
    if first is None:
        return case
    ps = case.page_size
    count = pages_needed(case.requests[first].length, ps) + pages_needed(case.host_reserved_tokens, ps) - 1
    return replace(case, host_free_pages=tuple(distinct_sample(c, 1, count + 32, count)))


def _host_receive(c: Choices, requests: list[QueuedRequest], ps: int, radix: bool) -> dict[str, Any]:
    """Host receive off, or on with a host reserve, a threshold, the device pool's usage above, at or below it and
    host pages for all of the host-capable requests' prompts and the reserve, less a shortfall."""
    if radix or c.integer(0, 2) == 0:  # on in two of three passes without the radix cache
        return {}
    reserve = c.integer(0, 2 * ps)
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
