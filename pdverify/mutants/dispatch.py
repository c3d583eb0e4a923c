"""Faults in the tokenizer manager's dispatch of a generate call: pdverify's port with one rule replaced.

Each mutant is what a slip in ``_normalize_bootstrap_params`` or ``_handle_batch_request`` could do: a sample sent in
its prompt's room (0.5.23's own F10), per-prompt rooms repeated for every sample round, a room one off, a sample
dropped, a warm-up that generates, the prompts' rooms crossed, the sequential path (attention DP) reading the call's
first room.
"""

from __future__ import annotations

from dataclasses import replace

from pdverify.model.dispatch import Dispatched, DispatchTrace, GenerateCall
from pdverify.mutants.catalogue import mutant
from pdverify.production.dispatch import Dispatch


class _PromptRoom(Dispatch):
    def sample_room(self, prompt: int, sample: int) -> int:
        return self.expanded_room(prompt)


@mutant("XN01", "generate_dispatch", "shared state", "every sample of a prompt is sent in the prompt's room (F10)")
def sample_in_prompt_room(call: GenerateCall, device: str) -> DispatchTrace:
    return _PromptRoom(call).run()


class _RepeatedList(Dispatch):
    def expanded_room(self, k: int) -> int:
        if isinstance(self.call.room, int):
            return super().expanded_room(k)
        return self.call.room[k % len(self.call.prompts)]


@mutant("XN02", "generate_dispatch", "shared state", "per-prompt rooms repeated for every sample round (list * n)")
def repeated_room_list(call: GenerateCall, device: str) -> DispatchTrace:
    return _RepeatedList(call).run()


class _OffByOne(Dispatch):
    def expanded_room(self, k: int) -> int:
        return super().expanded_room(k + 1) if isinstance(self.call.room, int) else super().expanded_room(k)


@mutant("XN03", "generate_dispatch", "off by one", "one room for the call names its k-th request room + k + 1")
def room_off_by_one(call: GenerateCall, device: str) -> DispatchTrace:
    return _OffByOne(call).run()


@mutant("XN04", "generate_dispatch", "missing case", "each prompt's last parallel sample is never sent")
def last_sample_dropped(call: GenerateCall, device: str) -> DispatchTrace:
    trace = Dispatch(call).run()
    if call.n == 1:
        return trace
    kept: list[Dispatched] = []
    for d in trace.sent:
        if d.max_new_tokens and sum(1 for k in kept if k.prompt == d.prompt and k.max_new_tokens) == call.n - 1:
            continue
        kept.append(d)
    return replace(trace, sent=tuple(kept))


class _GeneratingWarmup(Dispatch):
    def warmups(self) -> list[Dispatched]:
        return [replace(d, max_new_tokens=self.call.max_new_tokens) for d in super().warmups()]


@mutant("XN05", "generate_dispatch", "wrong value", "the prefix-caching warm-up asks for the call's new tokens")
def warmup_generates(call: GenerateCall, device: str) -> DispatchTrace:
    return _GeneratingWarmup(call).run()


class _CrossedRooms(Dispatch):
    def expanded_room(self, k: int) -> int:
        b = len(self.call.prompts)
        if isinstance(self.call.room, int):
            return super().expanded_room(k)
        return super().expanded_room(k - k % b + (b - 1 - k % b))


@mutant("XN06", "generate_dispatch", "wrong index", "per-prompt rooms handed to the prompts in reverse order")
def rooms_crossed(call: GenerateCall, device: str) -> DispatchTrace:
    return _CrossedRooms(call).run()


class _DpFirstRoom(Dispatch):
    def sample_room(self, prompt: int, sample: int) -> int:
        if self.call.attention_dp and not self.call.single and self.call.n == 1:
            return self.expanded_room(0)  # the sequential path reads the call's room, not the request's
        return super().sample_room(prompt, sample)


@mutant(
    "XN07",
    "generate_dispatch",
    "wrong index",
    "with attention DP a batch sent one request at a time gives every request the call's first room",
)
def attention_dp_first_room(call: GenerateCall, device: str) -> DispatchTrace:
    return _DpFirstRoom(call).run()
