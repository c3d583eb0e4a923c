"""The tokenizer manager's dispatch of one generate call on a PD server (``GenerateReqInput``'s normalisation and
``TokenizerManager._handle_batch_request``): which requests reach the scheduler, in which bootstrap rooms.

Q9: the call's samples are ``n`` of each prompt, each asking for the call's ``max_new_tokens``; without parallel
sampling each prompt's request carries the room the router gave it (an int room names the call's k-th request
``room + k``: SGLang's own normalisation, ``_normalize_bootstrap_params``); and no two samples of a call share a room.
A room names one KV transfer - prefill's sender and decode's receiver meet in it (the bootstrap server, the transfer
engine's tables) and decode aborts a request whose metadata row carries another room - so two samples in one room
are two transfers in one: the second is never matched and waits out its timeout, or the rows cross.
"""

from __future__ import annotations

from hypothesis import example

from pdverify.model.dispatch import DispatchTrace, GenerateCall
from pdverify.oracle import dispatch as oracle
from pdverify.properties.registry import Clause, applies, note_event, prop, within_release
from pdverify.strategies.dispatch import generate_calls
from pdverify.targets import Target

NEEDS = ("generate_dispatch",)

CHAT_N4 = GenerateCall(prompts=((128000, 128006, 882, 128007, 271, 9906, 0, 128009),), single=True, n=4,
                       room=7428370592110385201, max_new_tokens=100)  # fmt: skip
"""Production-shaped: an OpenAI chat completion with ``n=4`` (four answers to one prompt, Llama 3.1's chat template
around "Hello!") through the PD router, which gives the call one random room of ``[0, 2**63)``; 100 new tokens."""


@example(call=CHAT_N4)
@prop(
    "Q9",
    "the tokenizer manager dispatches a PD generate call as n samples of each prompt with the call's max_new_tokens; "
    "without parallel sampling each request carries the router's room (room + k for the call's k-th with one int "
    "room, its prompt's with per-prompt rooms); and every sample of the call carries a bootstrap room of its own",
    clauses=(
        Clause("samples", title="n samples of each prompt, each with the call's max_new_tokens"),
        Clause("router_room", title="with n = 1, each prompt's request in the room the router gave it"),
        Clause("distinct_rooms", title="no two samples of one call share a bootstrap room (each its own KV transfer)"),
    ),
    needs=NEEDS,
    call=generate_calls(),
)
def test_q9_dispatch_rooms(target: Target, device: str, call: GenerateCall) -> None:
    within_release(call)
    note_event("parallel samples" if call.n > 1 else "one sample a prompt")
    note_event("per-prompt rooms" if isinstance(call.room, tuple) else "one room for the call")
    trace: DispatchTrace = target.require("generate_dispatch")(call, device)
    assert not trace.raised, f"the dispatch raised: {trace.raised}"
    samples = trace.samples()
    if applies("samples"):
        got = sorted(d.prompt for d in samples)
        assert got == oracle.samples(call), (
            f"the call's samples are of prompts {got}, expected {call.n} of each of the {len(call.prompts)} prompts "
            f"{oracle.samples(call)}"
        )
        asked = sorted({d.max_new_tokens for d in samples})
        assert asked == [call.max_new_tokens], f"the samples ask for {asked} new tokens, the call {call.max_new_tokens}"
    want = oracle.router_rooms(call)
    if want is not None and applies("router_room"):
        got_rooms = [d.room for d in sorted(samples, key=lambda d: d.prompt)]
        assert got_rooms == want, (
            f"the requests of prompts 0..{len(call.prompts) - 1} carry rooms {got_rooms}, the router gave them {want} "
            f"(bootstrap_room={call.room!r})"
        )
    if applies("distinct_rooms"):
        rooms = [d.room for d in samples]
        twice = oracle.duplicates(rooms)
        assert None not in rooms and not twice, (
            f"the call's {len(samples)} samples carry rooms {rooms}: {twice or [None]} carried by more than one "
            f"(n={call.n}, {len(call.prompts)} prompt(s), bootstrap_room={call.room!r}); each sample is its own KV "
            "transfer and a room names one"
        )
