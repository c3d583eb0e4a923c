"""Port of the tokenizer manager's dispatch of one generate call (sglang 0.5.23 ``GenerateReqInput``'s bootstrap
normalisation and ``TokenizerManager._handle_batch_request``), with F10's fix.

The call is normalised into ``len(prompts) * n`` expanded requests, prompt-major within each sample round (the k-th
is prompt ``k % len(prompts)``'s sample ``k // len(prompts)``), each with its own room: an int room gives the k-th
``room + k``; a room per sample (a list as long as the expanded call) gives the k-th ``room[k]``; per-prompt rooms
give prompt ``i``'s sample ``s`` ``room[i] + s`` (the fix: 0.5.23 repeats the list, so every sample of a prompt shares
its room). With ``n > 1`` the manager first sends each prompt once with ``max_new_tokens = 0`` to warm the prefix
cache (in the prompt's room), then the samples - each with its own expanded request's room (the fix: 0.5.23 sends
every sample as a copy of the prompt's first expanded request, room included).
"""

from __future__ import annotations

from pdverify.model.dispatch import Dispatched, DispatchTrace, GenerateCall


class Dispatch:
    """One call's dispatch, each rule a method (the mutants replace one)."""

    def __init__(self, call: GenerateCall) -> None:
        self.call = call

    def expanded_room(self, k: int) -> int:
        """The room of the call's k-th expanded request (``_normalize_bootstrap_params`` with the fix): a list as long
        as the expanded call is taken as it is (a room per sample)."""
        room = self.call.room
        if isinstance(room, int):
            return room + k
        b = len(self.call.prompts)
        if len(room) == b * self.call.n:
            return room[k]
        return room[k % b] + k // b

    def sample_room(self, prompt: int, sample: int) -> int:
        """The room prompt ``prompt``'s sample ``sample`` is sent with: its own expanded request's."""
        return self.expanded_room(sample * len(self.call.prompts) + prompt)

    def warmups(self) -> list[Dispatched]:
        """The prefix-caching warm-ups sent ahead of parallel samples: each prompt once, in its first request's room."""
        if self.call.n == 1:
            return []
        return [Dispatched(i, self.expanded_room(i), 0) for i in range(len(self.call.prompts))]

    def run(self) -> DispatchTrace:
        sent = self.warmups()
        for i in range(len(self.call.prompts)):
            for s in range(self.call.n):
                sent.append(Dispatched(i, self.sample_room(i, s), self.call.max_new_tokens))
        return DispatchTrace(sent=tuple(sent))


def generate_dispatch(call: GenerateCall, device: str) -> DispatchTrace:
    """What the tokenizer manager sends for ``call`` (host-side bookkeeping: ``device`` is not read)."""
    return Dispatch(call).run()
