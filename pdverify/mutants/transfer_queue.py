"""Faults in decode's transfer queue: pdverify's port of one ``pop_transferred`` pass with one step replaced.

Each mutant is what a slip in SGLang's ``pop_transferred`` / ``_commit_transfer_to_req`` could do: a sentinel that
collides with a valid room, the row read at the wrong slot, a slot leaked or freed twice, a failure left queued, a
one-token request dropped, the queue reordered.
"""

from __future__ import annotations

from dataclasses import replace

from pdverify.model.transfer_queue import TOP_LOGPROBS_CAPACITY, TransferQueueCase, TransferTrace
from pdverify.mutants.catalogue import mutant
from pdverify.production.transfer_queue import Row, TransferPass


class _RoomSentinel(TransferPass):
    def landed(self, row: Row) -> bool:
        return row[1] != 0


@mutant("XU01", "transfer_queue", "sentinel collision", "a row whose room is 0 reads as not yet written (F8)")
def room_sentinel(case: TransferQueueCase, device: str) -> TransferTrace:
    return _RoomSentinel(case).run()


class _PrefillSlot(TransferPass):
    def row(self, i: int) -> Row:
        return self.rows[self.case.transfers[i].prefill_slot]


@mutant("XU02", "transfer_queue", "wrong index", "decode reads the row at the request's prefill slot")
def prefill_slot_row(case: TransferQueueCase, device: str) -> TransferTrace:
    return _PrefillSlot(case).run()


@mutant("XU03", "transfer_queue", "leak", "a committed request's decode slot is not freed")
def committed_slot_leaked(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    kept = {case.transfers[i].decode_slot for i in trace.committed}
    return replace(trace, freed=tuple(s for s in trace.freed if s not in kept))


@mutant("XU04", "transfer_queue", "missing case", "a failed transfer is left queued, neither aborted nor freed")
def failure_left_queued(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    failed = {case.transfers[i].decode_slot for i in trace.aborted}
    return replace(trace, aborted=(), queued=tuple(sorted((*trace.queued, *trace.aborted))),
                   freed=tuple(s for s in trace.freed if s not in failed))  # fmt: skip


@mutant("XU05", "transfer_queue", "missing case", "a one-token request finished by its first token is dropped")
def one_token_dropped(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    kept = [(i, tok) for i, tok in zip(trace.committed, trace.tokens, strict=True)
            if case.transfers[i].max_new_tokens > 1]  # fmt: skip
    return replace(trace, committed=tuple(i for i, _ in kept), tokens=tuple(tok for _, tok in kept))


@mutant("XU06", "transfer_queue", "wrong order", "the transfers left queued are kept in reverse order")
def queue_reversed(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    return replace(trace, queued=tuple(reversed(trace.queued)))


@mutant("XU07", "transfer_queue", "wrong value", "the committed request holds the row's room as its first token")
def room_as_token(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    return replace(trace, tokens=tuple(case.transfers[i].room for i in trace.committed))


@mutant("XU08", "transfer_queue", "missing field", "the first token's logprob is not committed (an empty logprob list)")
def logprob_dropped(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    return replace(trace, logprobs=tuple(None for _ in trace.committed))


@mutant("XU09", "transfer_queue", "missing field", "decode reports no cached tokens (its own count, 0)")
def cached_tokens_dropped(case: TransferQueueCase, device: str) -> TransferTrace:
    trace = TransferPass(case).run()
    return replace(trace, cached=tuple(0 for _ in trace.committed))


class _TopToCapacity(TransferPass):
    def top(self, row: Row, asked: int) -> tuple[tuple[float, int], ...]:
        return (*row[6], *[(0.0, 0)] * (TOP_LOGPROBS_CAPACITY - len(row[6])))


@mutant("XU10", "transfer_queue", "wrong bound", "top logprobs committed to the row's capacity, not top_logprobs_num")
def top_to_capacity(case: TransferQueueCase, device: str) -> TransferTrace:
    return _TopToCapacity(case).run()


class _NoIdsRow(TransferPass):
    def rows_after(self, i: int) -> tuple[int, int | None, int | None] | None:
        rows = super().rows_after(i)
        return None if rows is None else (rows[0], rows[1], None if rows[2] is None else 0)


@mutant("XU11", "transfer_queue", "missing field", "no token-ids logprob row reserved for the first token (0.5.22's)")
def no_token_ids_row(case: TransferQueueCase, device: str) -> TransferTrace:
    return _NoIdsRow(case).run()


class _NoTopBound(TransferPass):
    def admit(self, i: int) -> str:
        t = self.case.transfers[i]
        if t.top_beyond_row and t.poll == "success":  # admitted; the row's write raises, as set_buf does
            return (f"raised: RuntimeError: The expanded size of the tensor ({TOP_LOGPROBS_CAPACITY}) must match the "
                    f"existing size ({len(t.top_logprobs)})")  # fmt: skip
        return "admitted"


@mutant("XU12", "transfer_queue", "missing check", "no bound on top logprobs: the row's write raises in prefill (F9)")
def top_unbounded(case: TransferQueueCase, device: str) -> TransferTrace:
    return _NoTopBound(case).run()


class _RefuseAtCapacity(TransferPass):
    def admit(self, i: int) -> str:
        if len(self.case.transfers[i].top_logprobs) >= TOP_LOGPROBS_CAPACITY:
            return "refused: top_logprobs_num reaches the row's capacity"
        return "admitted"


@mutant("XU13", "transfer_queue", "off by one", "a request asking for exactly the row's top logprobs is refused")
def refuse_at_capacity(case: TransferQueueCase, device: str) -> TransferTrace:
    return _RefuseAtCapacity(case).run()


class _TruncateTop(TransferPass):
    def admit(self, i: int) -> str:
        return "admitted"  # past the row, the top logprobs are cut to it and the request goes on


@mutant("XU14", "transfer_queue", "silent truncation", "top logprobs past the row admitted and cut to the row")
def truncate_top(case: TransferQueueCase, device: str) -> TransferTrace:
    return _TruncateTop(case).run()


class _OwnPolls(TransferPass):
    def poll(self, i: int) -> str | None:
        t = self.case.transfers[i]
        return t.poll if not self.case.pp_step or t.consensus is not None else None


@mutant(
    "XU15",
    "transfer_queue",
    "ignored argument",
    "a PP stage's step polls its own receivers for the agreed transfers, failed or not (F11)",
)
def pp_own_polls(case: TransferQueueCase, device: str) -> TransferTrace:
    return _OwnPolls(case).run()


class _UnagreedPolled(TransferPass):
    def poll(self, i: int) -> str | None:
        t = self.case.transfers[i]
        return t.poll if self.case.pp_step and t.consensus is None else super().poll(i)


@mutant("XU16", "transfer_queue", "missing check", "a PP stage's step acts on a transfer the stages have not agreed on")
def pp_unagreed_polled(case: TransferQueueCase, device: str) -> TransferTrace:
    return _UnagreedPolled(case).run()
