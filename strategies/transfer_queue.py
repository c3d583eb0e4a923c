"""Strategies for decode's transfer queue: ``transfer_queues``."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import strategies as st

from pdverify.model.transfer_queue import (
    LLAMA3_EOS,
    MAX_ROOM,
    POLL_STATES,
    PROMPT,
    TOP_LOGPROBS_CAPACITY,
    VOCAB,
    Transfer,
    TransferQueueCase,
)
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._seeded import distinct_sample
from pdverify.strategies._validate import check_choices, check_int
from pdverify.strategies.checksum import ROOM_BOUNDARIES  # the routers' range ends, X2's too


def transfer_queues(
    *,
    max_transfers: int = 6,
    max_spare_slots: int = 4,
    max_new_tokens: int = 16,
    polls: tuple[str, ...] = POLL_STATES,
    max_top_logprobs: int = TOP_LOGPROBS_CAPACITY,
) -> st.SearchStrategy[TransferQueueCase]:
    """One ``pop_transferred`` pass: 1 to ``max_transfers`` queued transfers over ``transfers + 0..max_spare_slots``
    metadata rows a side. Each transfer's receiver reports success half the time, else any of ``polls`` (success the
    simplest; a failure only where the release aborts it: ``transfer_failure_abort``); its bootstrap room is half the
    time a boundary of the routers' ranges (``ROOM_BOUNDARIES``, 0 among them), else any room of ``[1, 2**63)``, each
    request its own; its slot on each side drawn apart from the others' (seeded order); its first token one of Llama
    3.1's eos ids a quarter of the time, else any id below ``VOCAB``; its ``max_new_tokens`` 1 to ``max_new_tokens``
    (1: finished by its first token); half the requests ask for logprobs (the first token's a multiple of 1/16 down to
    -15.9375), and prefill found 0 to ``PROMPT - 1`` of each prompt in its cache. A logprob request asks half the
    time for top logprobs - 1 to 20 (common client values), or one time in eight the metadata row's capacity
    (``TOP_LOGPROBS_CAPACITY``), and where ``max_top_logprobs`` is above it one time in eight more than the row holds
    (``capacity + 1`` half of those, else up to ``max_top_logprobs``: no release bounds the count), in rank order
    over distinct ids - and half the time names 1 to 4 token ids whose logprobs it wants (``token_ids_logprob``). The
    model's eos ids are Llama 3.1's, or a quarter of the time none (a configuration without ``eos_token_id``). The
    rows travel by Mooncake's aux transfer, or half the time by NIXL's where the release has it. Where the release has
    a decode PP loop, half the passes are a PP stage's step: each finished transfer agreed good (succeeded on every
    stage), bad (failed on some stage; this stage's receiver succeeded or failed) or not yet agreed, the rest not
    agreed on."""
    check_int("max_transfers", max_transfers, minimum=1)
    check_int("max_spare_slots", max_spare_slots)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_choices("polls", polls, POLL_STATES)
    check_int("max_top_logprobs", max_top_logprobs, minimum=TOP_LOGPROBS_CAPACITY)
    return _transfer_queues(max_transfers=max_transfers, max_spare_slots=max_spare_slots,
                            max_new_tokens=max_new_tokens, polls=polls, max_top=max_top_logprobs)  # fmt: skip


@st.composite
def _transfer_queues(
    draw: st.DrawFn,
    *,
    max_transfers: int,
    max_spare_slots: int,
    max_new_tokens: int,
    polls: tuple[str, ...],
    max_top: int,
) -> TransferQueueCase:
    c = Choices(draw)
    c.lean()
    n = c.integer(1, max_transfers)
    slots = n + c.integer(0, max_spare_slots)
    decode_slots = distinct_sample(c, 0, slots - 1, n)
    prefill_slots = distinct_sample(c, 0, slots - 1, n)
    # a failed transfer only where the release aborts it (#6504): before, the pass raised by design
    # the model's eos ids: Llama 3.1's, or none (a configuration without eos_token_id) one time in four
    eos = None if c.integer(0, 3) == 3 else LLAMA3_EOS
    ordered = [p for p in POLL_STATES if p in polls and (p != "failed" or DOMAIN.has("transfer_failure_abort"))]
    rooms: list[int] = []
    transfers = []
    for i in range(n):
        # half the transfers done (their row landed: the commit path), the rest any state
        poll = "success" if "success" in ordered and c.boolean() else c.pick(ordered)
        # the first token: one time in four one of the eos ids (the request ends at once), else any id
        token = c.pick(LLAMA3_EOS) if c.integer(0, 3) == 3 else c.integer(0, VOCAB - 1)
        budget = c.integer(1, max_new_tokens, lean=max_new_tokens)
        unused = [r for r in ROOM_BOUNDARIES if r not in rooms]
        room = c.pick(unused) if unused and c.boolean() else c.integer(1, MAX_ROOM)
        while room in rooms:  # a drawn room another request holds (one in 2**63): the next free one
            room = room % MAX_ROOM + 1
        rooms.append(room)
        transfers.append(Transfer(room=room, decode_slot=decode_slots[i], prefill_slot=prefill_slots[i],
                                  first_token=token, poll=poll, max_new_tokens=budget))  # fmt: skip
    # what prefill's row carries besides the token, drawn after the rest so that no earlier draw moved: the first
    # token's logprob half the time (a multiple of 1/16, exact in the row's float32), prefill's prefix-cache hit
    extras = []
    for t in transfers:
        logprob = -c.integer(0, 255) / 16 if c.boolean() else None
        extras.append(replace(t, logprob=logprob, cached_tokens=c.integer(0, PROMPT - 1)))
    # the transport whose aux transfer moves the rows: Mooncake's, or NIXL's half the time where the release has it
    nixl = DOMAIN.has("nixl_transport") and c.boolean()
    # what a logprob request asks past the first token's logprob, drawn last for the same reason
    extras = [_logprob_extras(c, t, max_top) if t.logprob is not None else t for t in extras]
    # a PP decode stage's step (the decode PP loop, 0.5.7 on), drawn last: what the stages agreed of each transfer
    pp = DOMAIN.has("pp_transfer_consensus") and c.boolean(lean=True)
    if pp:
        extras = [replace(t, consensus=_consensus(c, t.poll)) for t in extras]
    return TransferQueueCase(transfers=tuple(extras), slots=slots, eos_token_ids=eos,
                             transport="nixl" if nixl else "mooncake", pp_step=pp)  # fmt: skip


def _consensus(c: Choices, poll: str) -> str | None:
    """What the PP stages agreed of a transfer this stage's receiver reports ``poll`` for: a finished one (success)
    succeeded everywhere, failed on another stage, or is still in flight on another (None); a failed one failed
    (the stages agree at once) or is not yet agreed; one in flight here is not agreed on."""
    if poll == "success":
        return c.pick([None, "good", "bad"])
    if poll == "failed":
        return c.pick([None, "bad"])
    return None


def _logprob_extras(c: Choices, t: Transfer, max_top: int) -> Transfer:
    """A logprob request's top logprobs (half the time: 1 to 20, or one time in eight the row's capacity, one in
    eight past it where ``max_top`` allows; values multiples of 1/16 in rank order, distinct ids) and token ids (half
    the time 1 to 4 distinct ids)."""
    top: tuple[tuple[float, int], ...] = ()
    if c.boolean():
        size = c.integer(0, 7)
        if size == 7:
            k = TOP_LOGPROBS_CAPACITY
        elif size == 6 and max_top > TOP_LOGPROBS_CAPACITY:
            # one past the row half the time (the boundary), else any count up to max_top
            k = TOP_LOGPROBS_CAPACITY + 1 if c.boolean() else c.integer(TOP_LOGPROBS_CAPACITY + 1, max_top)
        else:
            k = c.integer(1, 20)
        rng = random.Random(c.seed())
        values = sorted((-rng.randrange(256) / 16 for _ in range(k)), reverse=True)
        top = tuple(zip(values, distinct_sample(c, 0, VOCAB - 1, k), strict=True))
    ids = tuple(distinct_sample(c, 0, VOCAB - 1, c.integer(1, 4))) if c.boolean() else None
    return replace(t, top_logprobs=top, token_ids_logprob=ids)
