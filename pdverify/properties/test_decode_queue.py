"""Decode's pre-allocation queue (``pop_preallocated`` over several requests): who is admitted, who fails, what
stays queued, and what each admitted request registers with prefill.

Q1-Q3 compare one pass against the oracle (``pdverify.oracle.decode_queue``): aborted requests, and requests whose KV
receiver failed (the release's own ``_update_handshake_waiters`` polls the receivers), fail, are released and
streamed once; admission is first come first served in queue (or priority) order, passes over requests
still bootstrapping or whose LoRA adapter does not fit, and stops at the first request without a metadata buffer,
a request row or the token budget; the queue keeps the rest in order. Q4 checks the admitted requests' resources
on their own: every destination list names exactly the pages the request was given, no page twice across
requests, never page 0; distinct buffers and rows, and no row or buffer taken beyond them; the allocated tokens
within the budget.
"""

from __future__ import annotations

from hypothesis import example

from pdverify.model.queue import DecodeQueueCase, QueuedRequest, QueueTrace
from pdverify.oracle.decode_queue import ExpectedPass, expected_pass
from pdverify.properties.registry import Clause, applies, examples, note_event, prop, within_domain, within_release
from pdverify.properties.releases import (
    BUDGET_READ_ONCE,
    DECODE_PREFIXES,
    DOMAIN,
    FROM_BUDGET_REREAD,
    FROM_KV_TRANSPORT,
    FROM_REQ_ROW_PADDING,
    FROM_SWA_BUDGET_REREAD,
    FROM_SWA_HEADROOM_RADIX_ONLY,
)
from pdverify.strategies.queue import decode_queues
from pdverify.targets import Target

NEEDS = ("decode_queue",)

FREE = (38, 61, 11, 62, 48, 33, 50, 7, 45, 8, 19, 27, 70, 3, 55, 41)
"""A fragmented free list (the pre-allocation worked example's, extended)."""


def _queue(*requests: QueuedRequest, **settings: object) -> DecodeQueueCase:
    base: dict[str, object] = {
        "page_size": 4,
        "requests": requests,
        "free_pages": FREE,
        "metadata_buffers": len(requests),
        "request_rows": len(requests),
        "token_budget": len(FREE) * 4,
    }
    return DecodeQueueCase(**{**base, **settings})  # type: ignore[arg-type]


def _three_one_token_tails(window: int) -> DecodeQueueCase:
    """Three 1-token requests on a hybrid SWA pool of page size 2 with the decode radix cache, a headroom of 1 and
    an SWA budget of 8: where the SWA budget's two forms (read once, re-read with its growth cap) part."""
    return _queue(
        *(R(1, output_len=0, max_new_tokens=1) for _ in range(3)),
        page_size=2,
        free_pages=tuple(range(1, 24)),
        token_budget=46,
        reserved_decode_tokens=1,
        radix=True,
        swa_free_pages=(1, 2, 3, 4, 5, 6),
        window=window,
        swa_token_budget=8,
    )


R = QueuedRequest
EXAMPLES = [
    # an aborted request (not yet streamed) ahead of two live ones; a still-bootstrapping one between them
    _queue(R(9, aborted=True), R(6), R(5, bootstrapped=False), R(7)),
    # buffers for two of three: the third waits
    _queue(R(5), R(6), R(7), metadata_buffers=2),
    # rows for one: the pass stops at the second
    _queue(R(5), R(6), request_rows=1),
    # the budget covers the first (8 tokens + 0 headroom, 5 + 3 new) but not the second (12 tokens)
    _queue(R(5, max_new_tokens=3), R(9, max_new_tokens=3), token_budget=16),
    # a budget of 6: the request's two whole pages (8 tokens) do not fit, its 5 tokens and 1 new one would - where
    # admission charges the fill length and the allocator takes whole pages, the pass allocates past it (T3)
    _queue(R(5, max_new_tokens=1), token_budget=6),
    # the same boundary for a rebootstrapped request (it takes the path without the radix cache) on a hybrid SWA pool
    # with the radix cache and no free SWA page: it must wait for the budget; admitted by its raw length, it would
    # fail for its SWA tail (T3 on Q1, 0.5.19-0.5.21)
    _queue(
        R(1, output_len=0, max_new_tokens=1, rebootstrap=True),
        page_size=2,
        free_pages=tuple(range(1, 22)),
        token_budget=1,
        running=((1, None),),
        radix=True,
        swa_free_pages=(),
        window=1,
    ),
    # priority scheduling, high values first, with a tie kept in queue order
    _queue(R(5, priority=1), R(6, priority=3), R(7, priority=1), priority_order="high_first", metadata_buffers=2),
    # the budget (16) covers the first request's 8 tokens + 8 of headroom, not the second's 4 + 8
    _queue(R(5, max_new_tokens=3), R(4, max_new_tokens=1), token_budget=16, reserved_decode_tokens=8),
    # LoRA with room for two adapters, "a" running: "b" joins, "c" waits, "a" behind it goes
    _queue(R(5, lora="b"), R(6, lora="c"), R(7, lora="a"), max_loras=2, running=((10, "a"),)),
    # the same with the radix cache, "c" holding a cached page: it waits, so its lock is released (Q5's view of T11)
    _queue(
        R(5, lora="b"),
        R(6, lora="c", prefix_pages=(90,)),
        R(7, lora="a"),
        max_loras=2,
        running=((10, "a"),),
        radix=True,
    ),
    # the radix cache: two requests share a 2-page prefix; the first needs 9 - 8 + 8 = 9 tokens, 4 fresh, and its
    # lock takes the prefix's 8 evictable tokens out of the budget (19 - 8 = 11 left); the second, its prefix locked
    # already, needs 16 - 8 + 8 = 16 > 11 - 4 left: it is turned away and releases its lock
    _queue(R(9, prefix_pages=(90, 91)), R(16, prefix_pages=(90, 91)), radix=True, token_budget=19),
    # an aborted request the pass looks at fails, the live one behind it is admitted: T18's Q2 form pinned (its pages
    # whole and its room to finish within them and the headroom, so that neither T3 nor T19 shows on it)
    _queue(R(8, aborted=True, max_new_tokens=1), R(4, max_new_tokens=1), reserved_decode_tokens=1),
    # the budget counts the radix cache's evictable pages and is re-read after the lock: 9 needed, 16 - 8 locked = 8
    # left - the request waits (checked against the budget from before its lock it would go)
    _queue(R(9, prefix_pages=(90, 91)), radix=True, token_budget=16),
    # a page two locks hold leaves the budget once: 29 - 8 locked (21 left) - 4 fresh, - 4 fresh (13 left),
    # - 4 newly locked (9 left) - 4 fresh; each needs 9 (counting the shared pages once per lock, the third would
    # find 29 - 28 locked - 8 fresh and wait)
    _queue(
        R(9, prefix_pages=(90, 91)),
        R(9, prefix_pages=(90, 91)),
        R(13, prefix_pages=(90, 91, 92)),
        radix=True,
        token_budget=29,
    ),
    # rebootstrapped: decode holds and receives the prompt and its outputs (6 + 3 = 9 tokens: a third page the
    # prompt alone does not reach), never matches
    _queue(R(6, output_len=3, rebootstrap=True, prefix_pages=(90,)), R(4, prefix_pages=(90,)), radix=True),
    # host receive (usage 0.9 >= threshold 0.8): the host-capable request goes to host pages 30, 31; the second
    # host-capable one finds 1 page + 4 reserved short and stops the pass
    _queue(
        R(6, host_capable=True),
        R(5),
        R(7, host_capable=True),
        R(3),
        host_threshold=0.8,
        pool_usage=0.9,
        host_free_pages=(30, 31, 32),
        host_reserved_tokens=4,
    ),
    # host receive with one request row and staging: the host-received request takes no row and no staging slot,
    # the device request behind it gets the row
    _queue(
        R(6, host_capable=True),
        R(5),
        host_threshold=0.8,
        pool_usage=0.9,
        host_free_pages=(30, 31),
        request_rows=1,
        staging=True,
    ),
    # a hybrid SWA pool (window 4) with SWA pages for one tail: the second request fails, the third (its prefix
    # matched) too, releasing its lock; the pass goes on. The SWA budget left to the radix cache's evictable pages
    # (swa_token_budget=None) passes them while nothing is evictable: a state 0.5.23's own tree was not seen to make
    # (its evictable SWA is what its eviction frees; docs/findings.md, stop 65) - this checks the defensive 503 branch
    _queue(R(6), R(7), R(9, prefix_pages=(90,)), radix=True, swa_free_pages=(70, 71), window=4),
    # a hybrid SWA pool at page size 2, a 1-token window and an SWA budget of 5 tokens: each 1-token request's SWA
    # tail takes a whole 2-token page, so two of the three fit - three if each tail is charged its raw token (T14)
    _queue(
        *(R(1, output_len=0, max_new_tokens=1) for _ in range(3)),
        page_size=2,
        free_pages=tuple(range(1, 24)),
        token_budget=46,
        swa_free_pages=(1, 2, 3, 4, 5, 6),
        window=1,
        swa_token_budget=5,
    ),
    # the same with the decode radix cache, a headroom of 1 and an SWA budget of 8: read once (to 0.5.18) the budget
    # charges each request its tail's page and its headroom (3), so two fit; re-read (0.5.19 on, #27770) it keeps back
    # only the headroom the 1-token windows can still grow - none, the buffer in use already exceeds it - so all three
    _three_one_token_tails(window=1),
    # the same with a 4-token window: after two admissions their windows can still grow 2 x 4 - 6 tokens in use = 2,
    # so the re-read budget keeps both headrooms back (8, 6, 2) and the third does not fit, as read once (8, 5, 2)
    _three_one_token_tails(window=4),
    # T14's production shape (a 128-token window, as gpt-oss; page size 64): three 1000-token prompts whose SWA tails
    # of 168 tokens take three pages each, 8 free SWA pages, an SWA budget of 512 tokens. Charged whole pages (192
    # each) two are admitted; charged the raw tail (3 x 168 = 504) all three are, and the third finds 2 pages for 3:
    # _pre_alloc asserts, and every property that runs the pass meets the crash
    _queue(
        *(R(1000, output_len=1, max_new_tokens=32) for _ in range(3)),
        page_size=64,
        free_pages=tuple(range(1, 60)),
        token_budget=59 * 64,
        running=((4096, None),),
        swa_free_pages=tuple(range(1, 9)),
        window=128,
        swa_token_budget=512,
    ),
    # a PP pass, the LoRA limit 1 taken by the other microbatch's adapter: the base-model request in the good list must
    # wait; on a hybrid SWA pool with the radix cache and no free SWA page a pass that admits it anyway (no LoRA gate,
    # T11) fails it for its SWA tail (Q1, 0.5.19)
    _queue(
        R(1, output_len=0, max_new_tokens=1, consensus="good"),
        page_size=2,
        free_pages=tuple(range(1, 9)),
        token_budget=16,
        max_loras=1,
        pp_consensus=True,
        microbatch_loras=("a",),
        radix=True,
        swa_free_pages=(),
        window=1,
    ),
    # a PP pass with the decode radix cache: the stages agreed the first request failed (on another stage) and the
    # second is ready; the first's prefix is matched here, so failing it releases its lock (to 0.5.16 the stage
    # polls its own receivers instead, finds the first ready and pre-allocates it, its lock kept: T32)
    _queue(R(9, prefix_pages=(90, 91), consensus="bad"), R(6, consensus="good"), radix=True, pp_consensus=True),
    # a matched prefix is not charged again: 9 - 8 + 8 = 9 tokens fit a budget of 10
    _queue(R(9, prefix_pages=(90, 91)), radix=True, token_budget=10),
    # the host reserve counts: 8 prompt tokens + 4 reserved do not fit 2 free host pages (8 tokens)
    _queue(
        R(7, host_capable=True),
        R(4),
        host_threshold=0.8,
        pool_usage=0.9,
        host_free_pages=(30, 31),
        host_reserved_tokens=4,
    ),
    # a running request of 1 token and two queued 2-token requests that may generate 20 each: with the running one
    # retracted, a request still needs 2 + 20 - 1 = 21 tokens, more than the budget of 10 - none is admitted
    _queue(
        R(2, output_len=0, max_new_tokens=20),
        R(2, output_len=0, max_new_tokens=20),
        page_size=1,
        free_pages=tuple(range(1, 30)),
        token_budget=10,
        running=((1, None),),
    ),
    # every queued receiver ready, and prefill has reported the first one's transfer failed: the pass polls anyway,
    # aborts it (500, streamed, receiver released) and admits the second ("Receiver polling observes asynchronous
    # failures while KV allocation is blocked", _update_handshake_waiters)
    _queue(R(6, receiver_failed="peer"), R(5)),
    # the same with KV allocation blocked (no metadata buffer free): the failed request fails now, the other waits
    _queue(R(6, receiver_failed="peer"), R(5), metadata_buffers=0),
    # the client aborted the second request while queued (its receiver aborted), every receiver ready
    _queue(R(5), R(6, receiver_failed="abort")),
    _queue(R(5), R(6, receiver_failed="abort"), metadata_buffers=0),
    # with the radix cache and one request row: the failed request fails, the next takes the row and keeps its lock
    _queue(R(6, receiver_failed="peer"), R(9, prefix_pages=(90, 91)), radix=True, request_rows=1),
    _queue(R(6, receiver_failed="abort"), R(9, prefix_pages=(90, 91)), radix=True, request_rows=1),
    # rids_to_check: a failed receiver outside it is left alone (its request stays queued), one inside fails
    _queue(R(5, receiver_failed="peer", checked=False), R(6, receiver_failed="peer"), R(7), restrict=True),
    # rids_to_check: the unchecked aborted request is left alone, the unchecked live one is not admitted
    _queue(
        R(5, aborted=True, checked=False),
        R(6, checked=False),
        R(7, aborted=True, abort_streamed=True),
        R(8),
        restrict=True,
    ),
    # a PP step (pp_size > 1, 0.5.7 on; #31869 the fix): the stages' consensus decides, not this stage's receivers. The
    # first request failed on another stage (bad), though its receiver here is ready: it fails. The second is good
    # though no earlier pass saw it ready: admitted. The third's receiver failed here after the stages agreed it good:
    # admitted all the same (the consensus is authoritative). The fourth is in neither list: left queued, though aborted
    _queue(
        R(6, consensus="bad"),
        R(5, bootstrapped=False, consensus="good"),
        R(7, receiver_failed="peer", consensus="good"),
        R(8, aborted=True),
        pp_consensus=True,
    ),
    # a PP pass with LoRA: the stage's other microbatch runs adapter b, this one a; two slots. The first request's
    # adapter c would make three loaded adapters: passed over; the second (a) is admitted
    _queue(
        R(5, lora="c", consensus="good"),
        R(6, lora="a", consensus="good"),
        running=((4, "a"),),
        microbatch_loras=("b",),
        max_loras=2,
        pp_consensus=True,
    ),
]


def _events(case: DecodeQueueCase, trace: QueueTrace) -> None:
    if trace.failed:
        note_event("aborted requests failed")
    if any(r.receiver_failed for r in case.requests):
        note_event("a KV receiver failed")
    live = [r for r in case.requests if r.bootstrapped and not r.aborted and r.receiver_failed is None]
    if len(trace.admitted) < len(live):
        note_event("admission stopped or passed over a request")
    if case.priority_order:
        note_event("priority scheduling")
    if case.max_loras:
        note_event("LoRA")
    if case.restrict:
        note_event("rids_to_check")
    if case.pp_consensus:
        note_event("a PP pass (the stages' consensus)")


def _names(case: DecodeQueueCase, indices: tuple[int, ...] | list[int]) -> str:
    return ", ".join(f"#{i}" for i in indices) or "none"


def _want(case: DecodeQueueCase, budget_reread: bool | None = None) -> ExpectedPass:
    """The oracle's pass under the release's rules: the budget re-read after each admission from 0.5.11 (#19746),
    read once before (Q1 and Q5 do not depend on it there: no SWA pool, no radix cache before 0.5.11); the SWA
    budget charged the decode headroom only with the radix cache from 0.5.14 (#28755), always before, and re-read
    after each admission from 0.5.19 (#27770), read once and charged each admission before."""
    if budget_reread is None:
        budget_reread = FROM_BUDGET_REREAD.not_applicable(DOMAIN.release) is None
    always = FROM_SWA_HEADROOM_RADIX_ONLY.not_applicable(DOMAIN.release) is not None
    swa_reread = FROM_SWA_BUDGET_REREAD.not_applicable(DOMAIN.release) is None
    return expected_pass(case, budget_reread=budget_reread, swa_headroom_always=always, swa_budget_reread=swa_reread)


BUDGET_CLAUSES = (
    Clause("budget_reread", FROM_BUDGET_REREAD, "the budget re-read after each admission"),
    Clause("budget_read_once", BUDGET_READ_ONCE, "the budget read once, each admission charged its pages and headroom"),
)


def _pass(target: Target, device: str, case: DecodeQueueCase) -> QueueTrace:
    within_release(case)  # an explicit example with a later release's input is outside an earlier one's domain
    within_domain(DOMAIN.rebootstrap or not any(r.rebootstrap for r in case.requests), "a PD rebootstrap")
    # only true retraction (#25372, with the rebootstrap) queues a request whose abort was already streamed
    streamed = any(r.aborted and r.abort_streamed for r in case.requests)
    within_domain(DOMAIN.rebootstrap or not streamed, "an abort already streamed while queued")
    within_domain(DOMAIN.allocation_policy or case.allocation_policy == "early", "an allocation policy")
    trace: QueueTrace = target.require("decode_queue")(case, device)
    _events(case, trace)
    return trace


@examples("case", EXAMPLES)
@prop(
    "Q1",
    "aborted requests the pass looks at fail: they leave the queue, their receiver is released, their abort is "
    "streamed unless it already was; so does a request whose KV receiver failed (prefill reported the failure, or "
    "the client's abort aborted the receiver: aborted with 500), whatever the other queued receivers' states, and "
    "one whose SWA tail finds no room in a hybrid SWA pool (503, streamed); no other request fails",
    needs=NEEDS,
    case=decode_queues(),
)
def test_q1_aborted_requests_fail(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    want = _want(case)
    assert list(trace.failed) == want.failed, (
        f"failed {_names(case, trace.failed)}, expected {_names(case, want.failed)}"
    )
    assert sorted(trace.cleared) == sorted(want.failed), (
        f"receivers released for {_names(case, trace.cleared)}, expected {_names(case, want.failed)}"
    )
    assert sorted(trace.streamed) == sorted(want.streamed), (
        f"aborts streamed for {_names(case, trace.streamed)}, expected {_names(case, want.streamed)} "
        "(an abort already streamed is not streamed again)"
    )


@examples("case", EXAMPLES)
@prop(
    "Q2",
    "admission is first come first served in queue (or priority) order: requests still bootstrapping or whose "
    "LoRA adapter does not fit are passed over, the pass stops at the first without a metadata buffer, a request "
    "row or the token budget, and never admits outside rids_to_check (a PP pass: outside the stages' consensus)",
    clauses=BUDGET_CLAUSES,
    needs=NEEDS,
    case=decode_queues(),
)
def test_q2_admission_order_and_stops(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    for clause, reread in (("budget_reread", True), ("budget_read_once", False)):
        if applies(clause):
            want = _want(case, budget_reread=reread)
            assert list(trace.admitted) == want.admitted, (
                f"admitted {_names(case, trace.admitted)}, expected {_names(case, want.admitted)} "
                f"(buffers {case.metadata_buffers}, rows {case.request_rows}, budget {case.token_budget} tokens)"
            )


@examples("case", EXAMPLES)
@prop(
    "Q3",
    "the queue after the pass holds every request neither admitted nor failed, in the pass's order, and aborts none "
    "of them (a failed receiver outside rids_to_check or the PP consensus leaves its request as it was)",
    clauses=(*BUDGET_CLAUSES, Clause("aborts_left", title="no request left queued is aborted by the pass")),
    needs=NEEDS,
    case=decode_queues(),
)
def test_q3_queue_keeps_the_rest(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    for clause, reread in (("budget_reread", True), ("budget_read_once", False)):
        if applies(clause):
            want = _want(case, budget_reread=reread)
            assert list(trace.remaining) == want.remaining, (
                f"queue after the pass {_names(case, trace.remaining)}, expected {_names(case, want.remaining)}"
            )
    if not applies("aborts_left"):
        return
    assert trace.aborted_left is not None, "the target does not report the aborts left queued (aborted_left)"
    # a request aborted before the pass and left queued is the queue clause's (it must have failed); this one is
    # about aborts the pass makes: a failed receiver outside rids_to_check leaves its request as it was
    new = sorted(i for i in trace.aborted_left if not case.requests[i].aborted)
    assert not new, f"requests aborted by the pass and left queued {_names(case, new)} (it aborts only what it sees)"


@examples("case", EXAMPLES)
@prop(
    "Q4",
    "each admitted request's destination list (in the wire's dtype: int32) names exactly the fresh pages it was given, "
    "for what prefill "
    "sends past its matched prefix (a rebootstrapped request: its outputs too); its row holds its prefix then those "
    "pages; no fresh page is given twice, none is page 0, a prefix page or outside the free list; buffers and rows "
    "are distinct, one row per device admission and one buffer per admission taken from the free ones, no more; "
    "the fresh tokens stay within the budget; row 0 is never given (it is padding)",
    clauses=(
        Clause("resources", title="destinations, pages, buffers, rows and the budget"),
        Clause("padding_row", FROM_REQ_ROW_PADDING, "request row 0 is padding, never given"),
        Clause("wire_dtype", FROM_KV_TRANSPORT, "the destination list in the dtype the metadata wire carries"),
    ),
    needs=NEEDS,
    case=decode_queues(),
)
def test_q4_admitted_destinations(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    applies("resources")
    ps, n = case.page_size, len(trace.admitted)
    per_request = {"pages": trace.pages, "dtypes": trace.dtypes, "aux": trace.aux, "rows": trace.rows,
                   "allocated": trace.allocated, "row prefixes": trace.row_prefix, "host": trace.host}  # fmt: skip
    for name, values in per_request.items():
        assert len(values) == n, f"{len(values)} {name} for {n} admitted requests"
    given: dict[int, int] = {}
    host_given: dict[int, int] = {}
    free = set(case.free_pages)
    for k, i in enumerate(trace.admitted):
        req = case.requests[i]
        assert trace.host[k] == case.to_host(i), (
            f"#{i} received on {'host' if trace.host[k] else 'device'} (threshold {case.host_threshold}, usage "
            f"{case.pool_usage}, host-capable {req.host_capable}, rebootstrap {req.rebootstrap})"
        )
        if trace.host[k]:
            note_event("received into host memory")
            _check_host(case, i, trace.pages[k], trace.dtypes[k], trace.allocated[k], host_given)
            continue
        prefix = case.prefix_len(i)
        want_prefix = [page * ps + o for page in req.prefix_pages[: prefix // ps] for o in range(ps)]
        assert list(trace.row_prefix[k]) == want_prefix, (
            f"#{i}'s row holds {list(trace.row_prefix[k])} for its prefix, the radix cache's pages are {want_prefix}"
        )
        locs = trace.allocated[k]
        assert len(locs) == req.fill_len - prefix, (
            f"#{i} was given {len(locs)} token slots for [{prefix}, {req.fill_len})"
        )
        held = [locs[p] // ps for p in range(0, len(locs), ps)]
        for j, loc in enumerate(locs):
            assert loc // ps == held[j // ps] and loc % ps == j % ps, (
                f"#{i}: token {prefix + j} at {loc} is not slot {j % ps} of its page {held[j // ps]}"
            )
        for page in held:
            assert page in free and page != 0, f"#{i} was given page {page}, not a free page (free: {sorted(free)})"
            assert page not in given, f"page {page} given to #{i} and to #{given[page]}"
            given[page] = i
        want = held[: -(-(req.prefill_len - prefix) // ps)]
        if applies("wire_dtype"):  # int32 from #7214 (0.4.7.post1), int64 before, on both sides of the wire
            wire = DOMAIN.wire_page_dtype
            assert trace.dtypes[k] == wire, f"#{i}'s destination list is {trace.dtypes[k]}, the wire carries {wire}"
        applies("resources")
        assert list(trace.pages[k]) == want, (
            f"#{i} registered destination pages {list(trace.pages[k])}, it holds {want} for positions "
            f"[{prefix}, {req.prefill_len}) (rebootstrap: {req.rebootstrap})"
        )
    assert len(set(trace.aux)) == n and all(0 <= a < case.metadata_buffers for a in trace.aux), (
        f"metadata buffers {list(trace.aux)} for {n} requests ({case.metadata_buffers} free)"
    )
    rows = [r for r, on_host in zip(trace.rows, trace.host, strict=True) if not on_host]
    assert len(set(rows)) == len(rows) and -1 not in rows, f"request rows {rows} (a host-received request takes none)"
    if applies("padding_row"):
        assert 0 not in rows, f"request rows {rows} (row 0 is padding)"
    applies("resources")
    used = len(given) * ps
    assert used <= case.token_budget, f"{used} tokens allocated, the budget was {case.token_budget}"
    assert trace.rows_left is not None and trace.buffers_left is not None, (
        "the target does not report the request rows and metadata buffers left free after the pass "
        "(QueueTrace.rows_left, QueueTrace.buffers_left)"
    )
    assert trace.rows_left == case.request_rows - len(rows), (
        f"{trace.rows_left} of {case.request_rows} request rows left free after {len(rows)} device admissions "
        f"({n - len(rows)} on host, which take none): a row was taken and not given, or given back twice"
    )
    assert trace.buffers_left == case.metadata_buffers - n, (
        f"{trace.buffers_left} of {case.metadata_buffers} metadata buffers left free after {n} admissions"
    )


def _check_host(
    case: DecodeQueueCase, i: int, pages: tuple[int, ...], dtype: str, locs: tuple[int, ...], given: dict[int, int]
) -> None:
    """A host-received request: host pages for its whole prompt, its destination list exactly those pages."""
    ps, length = case.page_size, case.requests[i].length
    held = [locs[p] // ps for p in range(0, len(locs), ps)]
    assert len(locs) == -(-length // ps) * ps, f"#{i} holds {len(locs)} host slots for its {length} tokens"
    for page in held:
        assert page in case.host_free_pages, f"#{i} was given host page {page}, not a free one"
        assert page not in given, f"host page {page} given to #{i} and to #{given[page]}"
        given[page] = i
    assert dtype == "int32" and list(pages) == held, f"#{i} registered host pages {list(pages)} ({dtype}), holds {held}"


@examples("case", EXAMPLES)
@prop(
    "Q5",
    "after the pass exactly the admitted requests with a matched device prefix hold a radix lock: a request turned "
    "away after its match releases it (else its prefix stays pinned in the cache)",
    needs=NEEDS,
    contract=DECODE_PREFIXES,  # decode's radix cache: before it no request matches a prefix, nothing takes a lock
    case=decode_queues(),
)
def test_q5_radix_locks(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    want = _want(case)
    if case.radix:
        note_event("radix cache")
    assert sorted(trace.locked) == sorted(want.locked), (
        f"radix locks held by {_names(case, sorted(trace.locked))}, expected {_names(case, sorted(want.locked))}"
    )


@examples("case", EXAMPLES)
@example(case=_queue(R(5, rebootstrap=True), R(6), staging=True, allocation_policy="early"))
@prop(
    "Q6",
    "the metadata handshake of each admitted request, in order: registered with decode's staging handler first "
    "when staging is on and it receives on the device (its prefetch needs the room), the room accepted (the prefix "
    "promised is page-aligned: the handler's scatter offsets shift by it), then the destinations sent, "
    "then - a rebootstrapped request under the early allocation policy - prefill asked to recompute it once; "
    "nothing for a request not admitted",
    needs=NEEDS,
    case=decode_queues(),
)
def test_q6_handshake_order(target: Target, device: str, case: DecodeQueueCase) -> None:
    trace = _pass(target, device, case)
    want: list[tuple[str, int]] = []
    for i in trace.admitted:
        if case.staging and not case.to_host(i):  # a host destination registers no staging slot
            want.append(("staging", i))
        want.append(("metadata", i))
        if case.requests[i].rebootstrap and case.allocation_policy == "early":
            want.append(("recompute", i))
    if case.staging or case.allocation_policy != "early":
        note_event(f"staging {case.staging}, policy {case.allocation_policy}")
    assert list(trace.events) == want, f"handshake {list(trace.events)}, expected {want}"
