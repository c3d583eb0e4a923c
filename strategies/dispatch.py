"""Strategies for the tokenizer manager's dispatch of a generate call: ``generate_calls``."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pdverify.model.dispatch import MAX_ROOM, MAX_SAMPLES, GenerateCall
from pdverify.model.transfer_queue import VOCAB
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._validate import check_int
from pdverify.strategies.checksum import ROOM_BOUNDARIES  # the routers' range ends

SAMPLE_COUNTS = (2, 3, 4, 8)
"""The parallel sample counts a call asks for when it asks for several (OpenAI ``n``: 2 to 4 common, 8 for best-of
sampling)."""


def generate_calls(
    *, max_prompts: int = 4, max_samples: int = 8, max_prompt_len: int = 8, max_new_tokens: int = 16
) -> st.SearchStrategy[GenerateCall]:
    """One ``/generate`` call as the PD router sends it: half the time a single prompt (an OpenAI chat completion),
    else a batch of 1 to ``max_prompts`` distinct prompts of 1 to ``max_prompt_len`` token ids below Llama 3's
    vocabulary; ``n`` parallel samples - half the time 1, else one of ``SAMPLE_COUNTS`` up to ``max_samples`` or any
    count up to it; the bootstrap room one int (a single call's, or half the time one room per sample as
    sgl-model-gateway sends a chat request with ``n`` > 1; a batch's half the time), half the time at a
    boundary of the routers' ranges (``ROOM_BOUNDARIES``, the last moved down so that every expanded request's room
    fits), else any room of ``[0, 2**63)``; a batch's per-prompt rooms otherwise, each any room whose window
    ``[room, room + n)`` fits and meets no other prompt's (the first at a range boundary half the time); every
    sample's ``max_new_tokens`` 1 to ``max_new_tokens``; a streamed response half the time; a prefill server with
    attention data parallelism half the time (drawn last: the draws before keep their meaning). Where the release
    takes no single room for a call it expands (before #10236: ``scalar_bootstrap_batch``), a batch carries
    per-prompt rooms and a single call with samples a room per sample."""
    check_int("max_prompts", max_prompts, minimum=1)
    check_int("max_samples", max_samples, minimum=1)
    check_int("max_prompt_len", max_prompt_len, minimum=1)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    if max_samples > MAX_SAMPLES:
        raise InvalidArgument(f"max_samples={max_samples} must be at most {MAX_SAMPLES}")
    return _generate_calls(max_prompts=max_prompts, max_samples=max_samples, max_prompt_len=max_prompt_len,
                           max_new_tokens=max_new_tokens)  # fmt: skip


@st.composite
def _generate_calls(
    draw: st.DrawFn, *, max_prompts: int, max_samples: int, max_prompt_len: int, max_new_tokens: int
) -> GenerateCall:
    c = Choices(draw)
    single = c.boolean()
    b = 1 if single else c.integer(1, max_prompts)
    prompts: list[tuple[int, ...]] = []
    while len(prompts) < b:
        prompt = tuple(c.integer(0, VOCAB - 1) for _ in range(c.integer(1, max_prompt_len)))
        while prompt in prompts:  # a prompt drawn twice: made different by more tokens (each longer than the last)
            prompt = (*prompt, len(prompts))
        prompts.append(prompt)
    counts = [k for k in SAMPLE_COUNTS if k <= max_samples]
    n = 1  # the simplest call: one sample a prompt
    if max_samples > 1 and c.boolean():
        n = c.pick(counts) if counts and c.boolean() else c.integer(2, max_samples)
    room: int | tuple[int, ...]
    # one room for a call the server expands (a batch, or parallel samples) only where the release takes it (#10236:
    # scalar_bootstrap_batch); before, such a call carries a list: a room per prompt, or per sample for a single one
    scalar = DOMAIN.has("scalar_bootstrap_batch")
    if single and n > 1 and (not scalar or c.boolean()):
        room = _distinct_rooms(c, n)  # sgl-model-gateway's chat form: a room for each sample
    elif single or (scalar and c.boolean()):
        last = MAX_ROOM - b * n + 1  # the largest room whose expanded requests all fit
        boundary = min(c.pick(ROOM_BOUNDARIES), last)
        room = boundary if c.boolean() else c.integer(0, last)
    else:
        last = MAX_ROOM - n + 1
        rooms: list[int] = []
        for i in range(b):
            r = min(c.pick(ROOM_BOUNDARIES), last) if i == 0 and c.boolean() else c.integer(0, last)
            while any(abs(r - other) < n for other in rooms):  # a window meeting another: the next one up
                r = (r + n) % (last + 1)
            rooms.append(r)
        room = tuple(rooms)
    return GenerateCall(prompts=tuple(prompts), single=single, n=n, room=room,
                        max_new_tokens=c.integer(1, max_new_tokens), stream=c.boolean(),
                        attention_dp=c.boolean())  # fmt: skip


def _distinct_rooms(c: Choices, count: int) -> tuple[int, ...]:
    """``count`` pairwise different rooms of ``[0, 2**63)``, the first at a range boundary half the time."""
    rooms: list[int] = []
    for i in range(count):
        r = c.pick(ROOM_BOUNDARIES) if i == 0 and c.boolean() else c.integer(0, MAX_ROOM)
        while r in rooms:  # a room drawn twice (one in 2**63): the next free one
            r = (r + 1) % (MAX_ROOM + 1)
        rooms.append(r)
    return tuple(rooms)
