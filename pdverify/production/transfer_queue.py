"""Port of decode's transfer queue pass (sglang 0.5.23 ``DecodeTransferQueue.pop_transferred``), with F8's fix.

Each side holds ``slots`` metadata rows of ``(first token, room, written)``. Prefill writes a request's row into its
slot (``set_buf``, which also sets the written mark - the fix) and the aux transfer copies it into decode's slot
(``send_aux``) before the receiver reports success. The pass polls every queued receiver; a failed transfer is
aborted, a successful one goes through the metadata gate - its row landed once its written mark is set (0.5.9-0.5.23
read a room of 0 as "not yet written": F8) - and is committed with the row's first token if the row is the request's
own (another room's row is corruption, aborted); a request asking for one token finishes at once. Every request that
left the queue frees its decode slot. A pipeline-parallel stage's step acts on the stages' agreement instead of its
own polls (F11's fix): a transfer failed on some stage is aborted, one that succeeded everywhere goes through the gate,
the rest stay queued.
"""

from __future__ import annotations

from pdverify.model.transfer_queue import TOP_LOGPROBS_CAPACITY, TransferQueueCase, TransferTrace

Row = tuple[int, int, int, float, int, int, tuple[tuple[float, int], ...]]
"""A metadata row: ``(first token, room, written, first token's logprob, its id, cached tokens, top logprobs)``."""
EMPTY: Row = (0, 0, 0, 0.0, 0, 0, ())


def row_landed(row: Row) -> bool:
    """The metadata gate: whether decode's row holds what prefill wrote (its written mark, not its room)."""
    return row[2] != 0


def handoff_rows(case: TransferQueueCase) -> list[Row]:
    """Decode's rows after prefill's ``set_buf`` and ``send_aux`` for every transfer whose receiver reports success
    (the receiver reports success only once the row landed); a row no transfer landed in stays cleared."""
    prefill = [EMPTY] * case.slots
    decode = [EMPTY] * case.slots
    for t in case.transfers:
        if t.poll == "success" and not t.top_beyond_row:  # a request beyond the row is refused, never queued
            logprob = 0.0 if t.logprob is None else t.logprob
            row = (t.first_token, t.room, 1, logprob, t.first_token, t.cached_tokens, t.top_logprobs)
            prefill[t.prefill_slot] = row
            decode[t.decode_slot] = prefill[t.prefill_slot]
    return decode


class TransferPass:
    """One pass over a case, each rule a method (the mutants replace one)."""

    def __init__(self, case: TransferQueueCase) -> None:
        self.case = case
        self.rows = handoff_rows(case)

    def landed(self, row: Row) -> bool:
        """The metadata gate."""
        return row_landed(row)

    def row(self, i: int) -> Row:
        """Decode's row of transfer ``i``: its own slot's."""
        return self.rows[self.case.transfers[i].decode_slot]

    def top(self, row: Row, asked: int) -> tuple[tuple[float, int], ...]:
        """The committed top logprobs: the row's first ``asked`` (the request's ``top_logprobs_num``)."""
        return row[6][:asked]

    def rows_after(self, i: int) -> tuple[int, int | None, int | None] | None:
        """The rows the commit leaves in each output logprob list the request asked for: one each - the token-ids
        list's an empty row (prefill sends no token-ids scores), reserved so the streamer's offset stays aligned."""
        t = self.case.transfers[i]
        if t.logprob is None:
            return None
        return (1, 1 if t.top_logprobs else None, None if t.token_ids_logprob is None else 1)

    def poll(self, i: int) -> str | None:
        """What the pass acts on for transfer ``i``: its receiver's poll; on a PP stage's step the stages' agreement -
        failed for a transfer failed on some stage, its own (successful) poll for one that succeeded on every stage,
        None (not looked at: kept) for one they have not agreed on."""
        t = self.case.transfers[i]
        if not self.case.pp_step:
            return t.poll
        return {"good": t.poll, "bad": "failed"}.get(t.consensus or "")

    def admit(self, i: int) -> str:
        """The server's admission of transfer ``i``'s request: refused when it asks for more top logprobs than a
        metadata row holds (SGLang: 'abort top_logprobs_num > 128 in PD'), else admitted."""
        t = self.case.transfers[i]
        if t.top_beyond_row:
            return (f"refused: top_logprobs_num {len(t.top_logprobs)} exceeds the {TOP_LOGPROBS_CAPACITY} top "
                    "logprobs a PD metadata row holds")  # fmt: skip
        return "admitted"

    def run(self) -> TransferTrace:
        committed: list[int] = []
        tokens: list[int] = []
        logprobs: list[tuple[float, int] | None] = []
        cached: list[int] = []
        top: list[tuple[tuple[float, int], ...] | None] = []
        rows: list[tuple[int, int | None, int | None] | None] = []
        aborted: list[int] = []
        queued: list[int] = []
        freed: list[int] = []
        prefill = [self.admit(i) for i in range(len(self.case.transfers))]
        for i, t in enumerate(self.case.transfers):
            if prefill[i] != "admitted":  # never queued on decode
                continue
            poll = self.poll(i)
            if poll == "failed":
                aborted.append(i)
                freed.append(t.decode_slot)
                continue
            row = self.row(i)
            if poll != "success" or not self.landed(row):
                queued.append(i)
                continue
            freed.append(t.decode_slot)
            if row[1] != t.room:  # another request's row: corruption, aborted
                aborted.append(i)
                continue
            committed.append(i)
            tokens.append(row[0])
            logprobs.append(None if t.logprob is None else (row[3], row[4]))
            cached.append(row[5])
            asked = len(t.top_logprobs)  # top logprobs come with logprob only (the model refuses them alone)
            top.append(self.top(row, asked) if asked else None)
            rows.append(self.rows_after(i))
        return TransferTrace(
            committed=tuple(committed),
            tokens=tuple(tokens),
            aborted=tuple(aborted),
            queued=tuple(queued),
            freed=tuple(sorted(freed)),
            logprobs=tuple(logprobs),
            cached=tuple(cached),
            top=tuple(top),
            rows=tuple(rows),
            prefill=tuple(prefill),
        )


def transfer_queue(case: TransferQueueCase, device: str) -> TransferTrace:
    """One ``pop_transferred`` pass over ``case`` (host-side bookkeeping: ``device`` is not read)."""
    return TransferPass(case).run()
