"""The tokenizer manager's dispatch of one generate call on a PD server: the call as the router sends it (prompts,
``n`` parallel samples, the bootstrap room), normalised (``GenerateReqInput.normalize_batch_and_arguments``) and
expanded into the requests the scheduler receives (``TokenizerManager.generate_request`` /
``_handle_batch_request``).

A ``GenerateCall`` is what the router puts in the request body it sends to both servers of a pair: the prompts as
token ids, ``sampling_params["n"]``, and ``bootstrap_room`` - one int, or one room per prompt. The room names the KV
transfer of a request: decode's receiver and prefill's sender meet in it (the bootstrap server, Mooncake's and
NIXL's transfer tables are keyed by it), and decode's commit aborts a request whose metadata row carries another
room ("Context corruption detected"). A ``DispatchTrace`` is what the tokenizer manager sent the scheduler, in order:
for each request, its prompt, its room and its ``max_new_tokens`` (0 for the prefix-caching warm-up the manager sends
ahead of a call's parallel samples).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pdverify.model.checksum import MAX_BOOTSTRAP_ROOM
from pdverify.validation import require_int

MAX_ROOM = MAX_BOOTSTRAP_ROOM
"""The largest bootstrap room (``[0, 2**63)``: the metadata row holds it as int64)."""
MAX_SAMPLES = 16
"""The most parallel samples a call asks for here (``n``; OpenAI clients use 1 to 8 mostly)."""


@dataclass(frozen=True)
class GenerateCall:
    """One ``/generate`` call as the PD router sends it to both servers."""

    prompts: tuple[tuple[int, ...], ...]
    """The prompts as token ids (``input_ids``), pairwise different, each non-empty."""
    single: bool
    """The call names one prompt (``input_ids`` a flat list, as an OpenAI chat completion does), not a batch of
    them (a list of lists); a single call has exactly one prompt."""
    n: int = 1
    """Parallel samples per prompt (``sampling_params["n"]``), 1 to ``MAX_SAMPLES``."""
    room: int | tuple[int, ...] = 0
    """The router's ``bootstrap_room``: one int for the call (SGLang's normalisation gives the k-th request of the
    expanded call ``room + k``); for a batch, one room per prompt (mini_lb's form); for a single call asking for
    ``n`` samples, one room per sample (``sgl-model-gateway``'s chat form: ``n`` rooms for one prompt), pairwise
    different. An int leaves ``room + len(prompts) * n - 1 <= MAX_ROOM``; per-prompt rooms leave the windows
    ``[room, room + n)`` disjoint and within ``MAX_ROOM`` (the router draws each from ``[0, 2**63)`` at random:
    windows of a few rooms never meet in practice)."""
    max_new_tokens: int = 16
    """Every sample's ``max_new_tokens`` (at least 1)."""
    stream: bool = False
    """The client streams the response (``stream``, an OpenAI ``stream=true``): the manager relays each sample's
    chunks as they come instead of collecting the samples' results."""
    attention_dp: bool = False
    """The prefill server runs attention data parallelism (``--enable-dp-attention --dp-size 2 --tp-size 2``, as
    DeepSeek models are served in PD): its tokenizer manager sends a batch's requests one by one (the sequential path
    of ``_handle_batch_request``, 0.5.5.post1 on), where it sends a batch of token-id prompts as one batch otherwise.
    The rooms the contract gives are the same."""

    def __post_init__(self) -> None:
        if not isinstance(self.prompts, tuple) or not self.prompts:
            raise ValueError(f"prompts must be a non-empty tuple of token-id tuples, got {self.prompts!r}")
        for p in self.prompts:
            if not isinstance(p, tuple) or not p:
                raise ValueError(f"each prompt must be a non-empty tuple of token ids, got {p!r}")
            for t in p:
                require_int("prompts[][]", t, minimum=0)
        if len(set(self.prompts)) != len(self.prompts):
            raise ValueError("the prompts must differ pairwise (the trace tells requests apart by their prompt)")
        if self.single and len(self.prompts) != 1:
            raise ValueError(f"a single call has one prompt, got {len(self.prompts)}")
        require_int("n", self.n, minimum=1)
        if self.n > MAX_SAMPLES:
            raise ValueError(f"n must be <= {MAX_SAMPLES}, got {self.n}")
        require_int("max_new_tokens", self.max_new_tokens, minimum=1)
        if not isinstance(self.stream, bool):
            raise ValueError(f"stream must be a bool, got {self.stream!r}")
        if not isinstance(self.attention_dp, bool):
            raise ValueError(f"attention_dp must be a bool, got {self.attention_dp!r}")
        count = len(self.prompts) * self.n
        if isinstance(self.room, tuple) and self.single:
            if len(self.room) != self.n:
                raise ValueError(f"a single call's rooms name one room per sample ({self.n}), got {len(self.room)}")
            for r in self.room:
                require_int("room[]", r, minimum=0)
                if r > MAX_ROOM:
                    raise ValueError(f"room[] must be <= 2**63 - 1, got {r}")
            if len(set(self.room)) != len(self.room):
                raise ValueError(f"the per-sample rooms must differ pairwise, got {self.room}")
        elif isinstance(self.room, tuple):
            if len(self.room) != len(self.prompts):
                raise ValueError(f"room must name one room per prompt ({len(self.prompts)}), got {len(self.room)}")
            for r in self.room:
                require_int("room[]", r, minimum=0)
                if r + self.n - 1 > MAX_ROOM:
                    raise ValueError(f"room[] + n - 1 must be <= 2**63 - 1, got {r} with n={self.n}")
            windows = sorted(self.room)
            if any(b < a + self.n for a, b in itertools.pairwise(windows)):
                raise ValueError(f"the per-prompt rooms' windows [room, room + n) must be disjoint, got {self.room}")
        else:
            require_int("room", self.room, minimum=0)
            if self.room + count - 1 > MAX_ROOM:
                raise ValueError(f"room + len(prompts) * n - 1 must be <= 2**63 - 1, got {self.room} with {count}")

    @property
    def expanded(self) -> bool:
        """Whether the server expands the call into several requests: a batch, or parallel samples."""
        return not self.single or self.n > 1

    def input_features(self) -> tuple[str, ...]:
        """The input features of ``pdverify.properties.releases.FEATURES`` the call uses: one room for a call the
        server expands into several requests is ``scalar_bootstrap_batch``'s (before #10236 such a call must carry
        its bootstrap fields as lists); the rest every release with a bootstrap room takes."""
        return ("scalar_bootstrap_batch",) if self.expanded and isinstance(self.room, int) else ()


@dataclass(frozen=True)
class Dispatched:
    """One request the tokenizer manager sent the scheduler."""

    prompt: int
    """Its prompt (index into ``GenerateCall.prompts``)."""
    room: int | None
    """Its ``bootstrap_room`` (None: it carries none)."""
    max_new_tokens: int
    """Its ``max_new_tokens``: 0 for a prefix-caching warm-up, the call's for a sample."""


@dataclass(frozen=True)
class DispatchTrace:
    sent: tuple[Dispatched, ...]
    """What the tokenizer manager sent the scheduler, in order."""
    raised: str = ""
    """What the dispatch raised (empty: nothing): the client gets an error and nothing of the call runs."""

    def samples(self) -> tuple[Dispatched, ...]:
        """The requests that generate (``max_new_tokens`` above 0): the call's samples."""
        return tuple(d for d in self.sent if d.max_new_tokens > 0)
