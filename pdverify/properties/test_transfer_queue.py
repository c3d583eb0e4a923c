"""Decode's transfer queue (``pop_transferred`` over the requests whose KV is in flight): who is committed with which
first token, who is aborted, what stays queued, which metadata slots are freed.

Q7 compares one pass against the oracle (``pdverify.oracle.transfer_queue``). A transfer whose receiver reports
success has its KV and prefill's metadata row in place: decode must commit it - the request holds the first token
prefill sampled and leaves the queue (for the running batch, or finished when that token was its last) - in
whatever bootstrap room the router put it, 0 included. A failed transfer is aborted (drawn from 0.4.6.post5: before
#6504 the pass raised by design, ``FROM_TRANSFER_FAILURE_ABORT``). Transfers still in flight stay queued, in
order, unaborted; each request that left the queue frees its decode slot, and no other slot is freed. What the row
carries besides the token reaches the committed request: the first token's logprob where the request asked for
logprobs (0.4.6.post5 on, #6558), its top logprobs where it asked for some, and prefill's cached prompt tokens (0.5.3
on). And the commit keeps a logprob request's output lists aligned: each list the output streamer slices with its one
offset (``send_output_token_logprobs_offset``) - token logprobs, top logprobs, token-ids logprobs, each where asked -
holds one row per output token, so that the k-th row streamed is the k-th token's in every list.
"""

from __future__ import annotations

from hypothesis import example

from pdverify.model.transfer_queue import TOP_LOGPROBS_CAPACITY, Transfer, TransferQueueCase, TransferTrace
from pdverify.oracle import transfer_queue as oracle
from pdverify.properties.registry import Clause, applies, note_event, prop, within_domain, within_release
from pdverify.properties.releases import FROM_PD_CACHED_TOKENS, FROM_PD_LOGPROB
from pdverify.strategies.transfer_queue import transfer_queues
from pdverify.targets import Target

NEEDS = ("transfer_queue",)

ROOM_ZERO = TransferQueueCase(
    transfers=(Transfer(room=0, decode_slot=5, prefill_slot=23, first_token=128006),
               Transfer(room=2**31 - 2, decode_slot=6, prefill_slot=24, first_token=128006)),
    slots=64,
)  # fmt: skip
"""Production-shaped: two requests of a Llama-3.1-8B deployment behind the gRPC PD router, both transferred, the first
in room 0 (one request in 2**31 - 1 there), the second at the router's last room; 64 metadata rows a side."""


def _names(indices: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(f"#{i}" for i in indices) + "]"


@example(case=ROOM_ZERO)
@prop(
    "Q7",
    "decode's transfer queue commits every transfer whose receiver reports success - the request holds prefill's "
    "first token and leaves the queue - whatever its bootstrap room, 0 included; aborts every failed one; keeps the "
    "transfers in flight queued in order, unaborted; frees the decode metadata slot of each request that left the "
    "queue, no other; and a committed request holds prefill's first-token logprob and top logprobs (when asked) and "
    "cached count, with one row per output token in each logprob list it asked for",
    clauses=(
        Clause("commit", title="every successful transfer committed with prefill's first token, in any room"),
        Clause("in_flight", title="transfers in flight stay queued in order; slots freed exactly for those that left"),
        Clause("failed_aborted", title="every failed transfer aborted, none other"),
        Clause(
            "logprob", FROM_PD_LOGPROB, "a committed request asking for logprobs holds prefill's first-token logprob"
        ),
        Clause("cached_tokens", FROM_PD_CACHED_TOKENS, "a committed request reports prefill's cached prompt tokens"),
        Clause("top_logprobs", FROM_PD_LOGPROB, "a committed request asking for top logprobs holds prefill's"),
        Clause(
            "logprob_rows",
            FROM_PD_LOGPROB,
            "a committed logprob request holds one row per output token in each logprob list it asked for",
        ),
    ),
    needs=NEEDS,
    case=transfer_queues(),
)
def test_q7_transfer_queue_commits(target: Target, device: str, case: TransferQueueCase) -> None:
    within_release(case)
    # a request asking for more top logprobs than the row holds never reaches the queue: Q8's
    within_domain(not any(t.top_beyond_row for t in case.transfers), "top logprobs beyond the metadata row")
    trace: TransferTrace = target.require("transfer_queue")(case, device)
    polls = {t.poll for t in case.transfers}
    note_event("a transfer in bootstrap room 0" if any(t.room == 0 for t in case.transfers) else "no room 0")
    note_event("a failed transfer" if "failed" in polls else "no failed transfer")
    note_event("a one-token request" if any(t.max_new_tokens == 1 for t in case.transfers) else "no one-token request")
    note_event("top logprobs asked" if any(t.top_logprobs for t in case.transfers) else "no top logprobs")
    asks_ids = any(t.token_ids_logprob is not None for t in case.transfers)
    note_event("token-ids logprobs asked" if asks_ids else "no token-ids logprobs")
    if case.pp_step:
        note_event("a PP stage's step: " + ("a transfer agreed failed whose receiver here succeeded" if any(
            t.consensus == "bad" and t.poll == "success" for t in case.transfers) else "no disagreement"))  # fmt: skip
    # what the step must follow: the receivers (a plain pass), or what the PP stages agreed
    good, bad, rest = (("agreed good", "agreed bad", "not agreed on") if case.pp_step
                       else ("successful", "failed", "in flight"))  # fmt: skip
    assert not trace.raised, f"the pass raised: {trace.raised}"
    if applies("commit"):
        want = oracle.committed(case)
        assert list(trace.committed) == want, (
            f"committed {_names(trace.committed)}, expected every {good} transfer {_names(want)} (rooms "
            f"{[case.transfers[i].room for i in want]})"
        )
        assert list(trace.tokens) == oracle.tokens(case), (
            f"the committed requests hold first tokens {list(trace.tokens)}, prefill sampled {oracle.tokens(case)}"
        )
    # what each committed request holds besides its token, whichever requests the pass committed
    done = list(trace.committed)
    # the rows first: a list short of a row (T30) says so before any value in it is compared
    if applies("logprob_rows"):
        assert trace.rows is not None, "the target does not report the committed logprob rows (TransferTrace.rows)"
        assert list(trace.rows) == oracle.rows(case, done), (
            f"the committed requests {_names(done)} hold (token, top, token-ids) logprob rows {list(trace.rows)} for "
            f"their one output token, expected {oracle.rows(case, done)} (one row in each list asked for, None: not "
            "asked): the streamer slices every list with one offset"
        )
    if applies("logprob"):
        assert trace.logprobs is not None, "the target does not report the committed logprobs (TransferTrace.logprobs)"
        assert list(trace.logprobs) == oracle.logprobs(case, done), (
            f"the committed requests {_names(done)} hold first-token (logprob, id) {list(trace.logprobs)}, prefill "
            f"computed {oracle.logprobs(case, done)} (None: no logprobs asked)"
        )
    if applies("cached_tokens"):
        assert trace.cached is not None, "the target does not report the committed cached tokens (TransferTrace.cached)"
        assert list(trace.cached) == oracle.cached(case, done), (
            f"the committed requests {_names(done)} report cached tokens {list(trace.cached)}, prefill cached "
            f"{oracle.cached(case, done)}"
        )
    if applies("top_logprobs"):
        assert trace.top is not None, "the target does not report the committed top logprobs (TransferTrace.top)"
        assert list(trace.top) == oracle.top_logprobs(case, done), (
            f"the committed requests {_names(done)} hold first-token top logprobs {list(trace.top)}, prefill computed "
            f"{oracle.top_logprobs(case, done)} (None: no top logprobs asked)"
        )
    if applies("failed_aborted"):
        assert list(trace.aborted) == oracle.aborted(case), (
            f"aborted {_names(trace.aborted)}, expected the {bad} transfers {_names(oracle.aborted(case))}"
        )
    if applies("in_flight"):
        assert list(trace.queued) == oracle.queued(case), (
            f"queue after the pass {_names(trace.queued)}, expected the transfers {rest} {_names(oracle.queued(case))}"
        )
        assert list(trace.freed) == oracle.freed(case), (
            f"freed decode slots {list(trace.freed)}, expected those of the requests that left {oracle.freed(case)}"
        )


@prop(
    "Q8",
    "a request the PD server admits never takes prefill down: one asking for more top logprobs than decode's metadata "
    f"row holds ({TOP_LOGPROBS_CAPACITY}) is turned away (SGLang: 'TODO: abort top_logprobs_num > 128 in PD'); every "
    "other request is admitted and its row written",
    clauses=(
        Clause(
            "prefill_write",
            FROM_PD_LOGPROB,
            "each request admitted and its row written, or, past the row's top logprobs, refused; prefill never raises",
        ),
    ),
    needs=NEEDS,
    case=transfer_queues(max_top_logprobs=2 * TOP_LOGPROBS_CAPACITY),
)
def test_q8_prefill_writes_every_admitted_row(target: Target, device: str, case: TransferQueueCase) -> None:
    within_release(case)
    beyond = [i for i, t in enumerate(case.transfers) if t.top_beyond_row]
    note_event("top logprobs beyond the row" if beyond else "every request within the row")
    trace: TransferTrace = target.require("transfer_queue")(case, device)
    if applies("prefill_write"):
        assert trace.prefill is not None, "the target does not report what prefill made of each request (prefill)"
        got = [outcome.split(":", 1)[0] for outcome in trace.prefill]
        want = oracle.prefill(case)
        detail = "; ".join(f"#{i}: {o}" for i, o in enumerate(trace.prefill) if not o.startswith("admitted"))
        asked = {f"#{i}": len(case.transfers[i].top_logprobs) for i in beyond}
        assert got == want, (
            f"prefill's outcome per request {got}, expected {want} (the requests asking for more top logprobs than "
            f"the row's {TOP_LOGPROBS_CAPACITY}: {asked}, refused; the rest admitted): {detail or 'nothing refused'}"
        )
