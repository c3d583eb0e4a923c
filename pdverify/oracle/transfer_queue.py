"""What one pass of decode's transfer queue must do, in plain Python over the case's lists."""

from __future__ import annotations

from pdverify.model.transfer_queue import TOP_LOGPROBS_CAPACITY, TransferQueueCase


def _outcome(case: TransferQueueCase, i: int) -> str:
    """What the pass must do with transfer ``i``: ``"commit"``, ``"abort"`` or ``"keep"``. A plain pass follows the
    receiver; a PP stage's step follows the stages' agreement alone - the good committed, the bad aborted, the rest
    kept, whatever this stage's receiver reports."""
    t = case.transfers[i]
    if case.pp_step:
        return {"good": "commit", "bad": "abort"}.get(t.consensus or "", "keep")
    return {"success": "commit", "failed": "abort"}.get(t.poll, "keep")


def committed(case: TransferQueueCase) -> list[int]:
    """Every transfer whose receiver reports success (on a PP stage: that every stage's did), in queue order: its row
    has landed, whatever its room."""
    return [i for i in range(len(case.transfers)) if _outcome(case, i) == "commit"]


def tokens(case: TransferQueueCase) -> list[int]:
    """The first token each committed request holds: the one prefill sampled."""
    return [case.transfers[i].first_token for i in committed(case)]


def aborted(case: TransferQueueCase) -> list[int]:
    """Every transfer whose receiver reports a failure (on a PP stage: that some stage's did), in queue order."""
    return [i for i in range(len(case.transfers)) if _outcome(case, i) == "abort"]


def queued(case: TransferQueueCase) -> list[int]:
    """The transfers still in flight (on a PP stage: those the stages have not agreed on), in queue order."""
    return [i for i in range(len(case.transfers)) if _outcome(case, i) == "keep"]


def freed(case: TransferQueueCase) -> list[int]:
    """The decode slots of the transfers that left the queue (committed or aborted), sorted."""
    return sorted(t.decode_slot for i, t in enumerate(case.transfers) if _outcome(case, i) != "keep")


def logprobs(case: TransferQueueCase, committed: list[int]) -> list[tuple[float, int] | None]:
    """The first token's logprob and id each of ``committed`` holds, where it asked for logprobs: prefill's."""
    out: list[tuple[float, int] | None] = []
    for i in committed:
        t = case.transfers[i]
        out.append(None if t.logprob is None else (t.logprob, t.first_token))
    return out


def cached(case: TransferQueueCase, committed: list[int]) -> list[int]:
    """The cached prompt tokens each of ``committed`` reports: prefill's count."""
    return [case.transfers[i].cached_tokens for i in committed]


def top_logprobs(case: TransferQueueCase, committed: list[int]) -> list[tuple[tuple[float, int], ...] | None]:
    """The first token's top logprobs each of ``committed`` holds, where it asked for some: prefill's, in rank order."""
    out: list[tuple[tuple[float, int], ...] | None] = []
    for i in committed:
        t = case.transfers[i]
        out.append(tuple(t.top_logprobs) if t.logprob is not None and t.top_logprobs else None)
    return out


def rows(case: TransferQueueCase, committed: list[int]) -> list[tuple[int, int | None, int | None] | None]:
    """Each committed request's output logprob lists after the commit: one row - the first token's - in every list it
    asked for (token logprobs always, top logprobs when it asked for some, token-ids logprobs when it named ids), so
    that the streamer's one offset reads token k's row in each; None for a list it did not ask for, and for a request
    asking for no logprobs."""
    out: list[tuple[int, int | None, int | None] | None] = []
    for i in committed:
        t = case.transfers[i]
        if t.logprob is None:
            out.append(None)
            continue
        out.append((1, 1 if t.top_logprobs else None, None if t.token_ids_logprob is None else 1))
    return out


def prefill(case: TransferQueueCase) -> list[str]:
    """What becomes of each request on prefill: ``"refused"`` when it asks for more top logprobs than a metadata row
    holds (SGLang: 'abort top_logprobs_num > 128 in PD' - the server turns it away, it never reaches prefill's
    write), else ``"admitted"``."""
    return ["refused" if len(t.top_logprobs) > TOP_LOGPROBS_CAPACITY else "admitted" for t in case.transfers]
