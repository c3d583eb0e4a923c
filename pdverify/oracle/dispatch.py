"""What the tokenizer manager must send for one generate call on a PD server, in plain Python over the call's lists."""

from __future__ import annotations

from pdverify.model.dispatch import GenerateCall


def samples(call: GenerateCall) -> list[int]:
    """The prompt of each sample the call must generate, sorted: ``n`` of each prompt."""
    out: list[int] = []
    for i in range(len(call.prompts)):
        for _ in range(call.n):
            out.append(i)
    return out


def router_rooms(call: GenerateCall) -> list[int] | None:
    """Without parallel sampling (``n == 1``), the room each prompt's request carries, in prompt order: the router's
    - an int room names the call's k-th request ``room + k`` (SGLang's normalisation), per-prompt rooms name their
    prompt's. None with ``n > 1``: the rooms of the samples are the server's to derive (``distinct``)."""
    if call.n != 1:
        return None
    if isinstance(call.room, tuple):
        return list(call.room)
    return [call.room + k for k in range(len(call.prompts))]


def duplicates(rooms: list[int | None]) -> list[int | None]:
    """The rooms that more than one of ``rooms`` carries, in first-seen order: none may (each sample is its own KV
    transfer, and a room names one)."""
    seen: list[int | None] = []
    twice: list[int | None] = []
    for r in rooms:
        if r in seen and r not in twice:
            twice.append(r)
        seen.append(r)
    return twice
