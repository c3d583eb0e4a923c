"""Decode's transfer queue: one ``DecodeTransferQueue.pop_transferred`` pass over the requests whose KV is in flight
(sglang 0.5.23's ``pop_transferred`` with its metadata gate and ``_commit_transfer_to_req``).

A ``TransferQueueCase`` is what one pass reads: the queued transfers in queue order, each with the state its KV
receiver reports when polled, its bootstrap room, its metadata slot on each side and the first output token prefill
sampled. For a transfer whose receiver reports success, prefill's metadata row (first token, cached tokens, room)
has landed in decode's slot: prefill writes it (``set_buf``) and sends it beside the last KV chunk (``send_aux``),
and the receiver reports success only once both arrived. A ``TransferTrace`` is what the pass did: which transfers
it committed (the request holds prefill's first token and leaves the queue for the running batch, or finishes at
once when it asked for one token), which it aborted, which it left queued, and which metadata slots it freed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from pdverify.model.checksum import MAX_BOOTSTRAP_ROOM
from pdverify.model.pipeline import PP_CONSENSUS
from pdverify.validation import require_int

POLL_STATES = ("success", "transferring", "waiting", "bootstrapping", "failed")
"""What a queued transfer's KV receiver reports (``KVPoll``): ``"success"`` - every chunk and prefill's metadata row
landed; ``"transferring"``, ``"waiting"`` (``WaitingForInput``), ``"bootstrapping"`` - still in flight;
``"failed"`` - prefill or the transfer engine reported a failure."""
TRANSPORTS = ("mooncake", "nixl")
"""The KV transports whose aux transfer moves prefill's metadata row (``--disaggregation-transfer-backend``):
Mooncake's (every release with a transport) and NIXL's (0.4.5.post3 on)."""
IN_FLIGHT = ("transferring", "waiting", "bootstrapping")
"""The poll states of a transfer still in flight: the pass leaves it queued."""
MAX_ROOM = MAX_BOOTSTRAP_ROOM
"""The largest bootstrap room (the metadata row holds it as int64)."""
VOCAB = 128256
"""The model's vocabulary (Llama 3's): prefill samples first tokens below it, and decode's requests carry it as
``vocab_size``."""
PROMPT = 24
"""Prompt tokens of every queued request (the queue reads none of them; prefill's cache hit is a count of them)."""
TOP_LOGPROBS_CAPACITY = 128
"""The top logprobs a metadata row holds (``MetadataBuffers(max_top_logprobs_num=128)``, the size every release's
scheduler builds). The server admits a request asking for more - no release bounds ``top_logprobs_num`` - and SGLang
states what must become of it: 'TODO: abort top_logprobs_num > 128 in PD' (``MetadataBuffers.__init__``)."""
LLAMA3_EOS = (128001, 128008, 128009)
"""Llama-3.1-Instruct's eos ids (its configuration's ``eos_token_id``): what the scheduler gives each request as
``eos_token_ids``."""


@dataclass(frozen=True)
class Transfer:
    """One request in decode's transfer queue."""

    room: int
    """The request's ``bootstrap_room``, in ``[0, MAX_ROOM]``: 0 is a room like any other."""
    decode_slot: int
    """Its metadata slot on decode (``DecodeRequest.metadata_buffer_index``): the row prefill's row lands in."""
    prefill_slot: int
    """Its metadata slot on prefill (``req.metadata_buffer_index`` there): the row prefill writes and sends."""
    first_token: int
    """The first output token prefill sampled (``set_buf`` writes it into the row)."""
    poll: str = "success"
    """What its KV receiver reports (``POLL_STATES``)."""
    max_new_tokens: int = 8
    """The request's ``max_new_tokens``: with 1, the first token finishes it at once."""
    logprob: float | None = None
    """The logprob of the first token prefill computed, when the request asks for logprobs (``return_logprob``; no
    top logprobs); None: it asks for none. The metadata row holds it as float32, so it must be one exactly."""
    cached_tokens: int = 0
    """Prompt tokens prefill found in its prefix cache (``req.cached_tokens``): the usage decode reports."""
    top_logprobs: tuple[tuple[float, int], ...] = ()
    """The first token's top logprobs prefill computed, ``(logprob, token id)`` in rank order, for a request asking
    for logprobs with ``top_logprobs_num = len(top_logprobs)`` (empty: it asks for none; more than
    ``TOP_LOGPROBS_CAPACITY``: more than a metadata row holds). Each logprob exact in float32, like ``logprob``."""
    token_ids_logprob: tuple[int, ...] | None = None
    """The token ids whose logprobs the request asks for at each output token (``token_ids_logprob``), with
    ``logprob``; None: it asks for none."""
    consensus: str | None = None
    """On a PP stage's transfer step (``TransferQueueCase.pp_step``), what the stages agreed of this transfer
    (``PP_CONSENSUS``): ``"good"`` - its receiver succeeded on every stage (this one's included: ``poll`` success),
    ``"bad"`` - it failed on some stage (this stage's receiver finished: ``poll`` success or failed); None: the stages
    have not agreed on it yet (in flight on some stage), whatever this stage's receiver reports."""

    def __post_init__(self) -> None:
        require_int("room", self.room, minimum=0)
        if self.room > MAX_ROOM:
            raise ValueError(f"room must be <= 2**63 - 1 (the metadata row holds it as int64), got {self.room}")
        require_int("decode_slot", self.decode_slot, minimum=0)
        require_int("prefill_slot", self.prefill_slot, minimum=0)
        require_int("first_token", self.first_token, minimum=0)
        if self.first_token >= VOCAB:
            raise ValueError(f"first_token must be < {VOCAB} (a vocabulary id), got {self.first_token}")
        if self.poll not in POLL_STATES:
            raise ValueError(f"poll must be one of {', '.join(POLL_STATES)}, got {self.poll!r}")
        require_int("max_new_tokens", self.max_new_tokens, minimum=1)
        if self.consensus not in (None, *PP_CONSENSUS):
            raise ValueError(f"consensus must be None or one of {', '.join(PP_CONSENSUS)}, got {self.consensus!r}")
        if self.consensus == "good" and self.poll != "success":
            raise ValueError(f"consensus 'good' (succeeded on every stage) needs poll 'success', got {self.poll!r}")
        if self.consensus == "bad" and self.poll not in ("success", "failed"):
            raise ValueError(f"consensus 'bad' (every stage finished, one failed) needs poll 'success' or 'failed' "
                             f"on this stage, got {self.poll!r}")  # fmt: skip
        if self.logprob is not None:
            lp = self.logprob
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 0:
                raise ValueError(f"logprob must be None or a finite float <= 0, got {lp!r}")
            if struct.unpack("f", struct.pack("f", lp))[0] != lp:
                raise ValueError(f"logprob must be exact in float32 (the metadata row's dtype), got {lp!r}")
        require_int("cached_tokens", self.cached_tokens, minimum=0)
        self._check_logprob_extras()
        if self.cached_tokens >= PROMPT:
            raise ValueError(f"cached_tokens must be < {PROMPT} (prefill computes one prompt token at least), got "
                             f"{self.cached_tokens}")  # fmt: skip

    @property
    def top_beyond_row(self) -> bool:
        """Whether the request asks for more top logprobs than a metadata row holds (``TOP_LOGPROBS_CAPACITY``)."""
        return len(self.top_logprobs) > TOP_LOGPROBS_CAPACITY

    def _check_logprob_extras(self) -> None:
        asked = self.top_logprobs or self.token_ids_logprob is not None
        if asked and self.logprob is None:
            raise ValueError("top_logprobs and token_ids_logprob need logprob (the request asks for logprobs: "
                             "return_logprob); got them with logprob=None")  # fmt: skip
        if not isinstance(self.top_logprobs, tuple) or len(self.top_logprobs) > VOCAB:
            got = f"{len(self.top_logprobs)} pairs" if isinstance(self.top_logprobs, tuple) else repr(self.top_logprobs)
            raise ValueError(f"top_logprobs must be a tuple of at most {VOCAB} (logprob, id) pairs, one per "
                             f"vocabulary id; got {got}")  # fmt: skip
        for pair in self.top_logprobs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(f"top_logprobs[] must be a (logprob, token id) pair, got {pair!r}")
            lp, tok = pair
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 0:
                raise ValueError(f"top_logprobs[] logprob must be a finite float <= 0, got {lp!r}")
            if struct.unpack("f", struct.pack("f", lp))[0] != lp:
                raise ValueError(f"top_logprobs[] logprob must be exact in float32 (the row's dtype), got {lp!r}")
            require_int("top_logprobs[] token id", tok, minimum=0)
            if tok >= VOCAB:
                raise ValueError(f"top_logprobs[] token id must be < {VOCAB}, got {tok}")
        if self.token_ids_logprob is not None:
            ids = self.token_ids_logprob
            if not isinstance(ids, tuple) or not ids:
                raise ValueError(f"token_ids_logprob must be None or a non-empty tuple of token ids, got {ids!r}")
            for tok in ids:
                require_int("token_ids_logprob[]", tok, minimum=0)
                if tok >= VOCAB:
                    raise ValueError(f"token_ids_logprob[] must be < {VOCAB}, got {tok}")


@dataclass(frozen=True)
class TransferQueueCase:
    """One ``pop_transferred`` pass: the queued transfers in queue order, over ``slots`` metadata rows a side."""

    transfers: tuple[Transfer, ...]
    slots: int = 8
    """The metadata rows on each side (``MetadataBuffers(size)``; the allocator's size on decode)."""
    eos_token_ids: tuple[int, ...] | None = LLAMA3_EOS
    """The model's eos ids, each request's ``eos_token_ids`` (``model_config.hf_eos_token_id``); None: a model whose
    configuration names none. A first token among them ends the request like its last token."""
    transport: str = "mooncake"
    """The KV transport (``TRANSPORTS``): whose ``send_aux`` moves each row to decode."""
    pp_step: bool = False
    """A pipeline-parallel decode stage's transfer step (``--pp-size`` above 1, the decode PP event loop of #14945)
    instead of a plain pass: the stages agreed which transfers succeeded everywhere and which failed somewhere
    (``Transfer.consensus``), and the stage must apply exactly that - commit the good, abort the bad, keep the rest
    queued whatever its own receivers report - or the stages' batches diverge."""

    def __post_init__(self) -> None:
        require_int("slots", self.slots, minimum=1)
        if not isinstance(self.pp_step, bool):
            raise ValueError(f"pp_step must be a bool, got {self.pp_step!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.eos_token_ids is not None:
            if not isinstance(self.eos_token_ids, tuple) or not self.eos_token_ids:
                raise ValueError(f"eos_token_ids must be None or a non-empty tuple of ids, got {self.eos_token_ids!r}")
            for e in self.eos_token_ids:
                require_int("eos_token_ids[]", e, minimum=0)
        if not isinstance(self.transfers, tuple) or not all(isinstance(t, Transfer) for t in self.transfers):
            raise ValueError(f"transfers must be a tuple of Transfer, got {self.transfers!r}")
        for side in ("decode_slot", "prefill_slot"):
            used = [getattr(t, side) for t in self.transfers]
            if any(s >= self.slots for s in used):
                raise ValueError(f"every {side} must be < slots={self.slots}, got {used}")
            if len(set(used)) != len(used):
                raise ValueError(f"each queued request holds its own {side}; got {used} (one row, one request)")
        rooms = [t.room for t in self.transfers]
        if len(set(rooms)) != len(rooms):
            raise ValueError(f"each queued request has its own bootstrap room, got {rooms}")
        if not self.pp_step and any(t.consensus is not None for t in self.transfers):
            raise ValueError("a transfer's consensus needs pp_step=True (only a PP stage's step is given one)")

    def input_features(self) -> tuple[str, ...]:
        """The input features of ``pdverify.properties.releases.FEATURES`` the case uses: a failed transfer is
        ``transfer_failure_abort``'s (before #6504 the pass raised by design), the NIXL transport ``nixl_transport``'s;
        the rest every release with a KV transport can queue."""
        used = ["transfer_failure_abort"] if any(t.poll == "failed" for t in self.transfers) else []
        if self.transport == "nixl":
            used.append("nixl_transport")
        if self.pp_step:
            used.append("pp_transfer_consensus")
        return tuple(used)


@dataclass(frozen=True)
class TransferTrace:
    committed: tuple[int, ...]
    """The transfers committed (indices into ``case.transfers``, in queue order): the request holds prefill's first
    token and left the queue unaborted - for the running batch, or finished at once."""
    tokens: tuple[int, ...]
    """The first output token each committed request holds, in ``committed``'s order."""
    aborted: tuple[int, ...]
    """The transfers the pass aborted (their request's abort streamed), in queue order."""
    queued: tuple[int, ...]
    """The queue after the pass, in order."""
    freed: tuple[int, ...]
    """The decode metadata slots the pass returned to the allocator, sorted."""
    raised: str = ""
    """What the pass raised (empty: nothing)."""
    logprobs: tuple[tuple[float, int] | None, ...] | None = None
    """Per committed request, in ``committed``'s order: the first token's ``(logprob, token id)`` decode committed
    (None: it asked for no logprobs). None: the target does not report them."""
    cached: tuple[int, ...] | None = None
    """Per committed request: the cached prompt tokens decode holds for it (``req.cached_tokens``). None: the target
    does not report them."""
    top: tuple[tuple[tuple[float, int], ...] | None, ...] | None = None
    """Per committed request: the first token's top logprobs decode committed, ``(logprob, token id)`` pairs (None:
    it asked for no top logprobs). None: the target does not report them."""
    prefill: tuple[str, ...] | None = None
    """Per transfer, in queue order, what became of its request on prefill: ``"admitted"`` (the server admitted it
    and, where its transfer succeeded, prefill wrote its metadata row), ``"refused: <why>"`` (the server's admission
    refused it: the client got an error, nothing was queued) or ``"raised: <error>"`` (admitted, and prefill's write
    of its row raised - in the prefill scheduler, which dies). None: the target does not report it."""
    rows: tuple[tuple[int, int | None, int | None] | None, ...] | None = None
    """Per committed request asking for logprobs: how many rows its output logprob lists hold after the commit -
    ``(token logprobs, top logprobs or None, token-ids logprobs or None)``, None for a list it did not ask for - the
    lists the output streamer slices with one offset (``send_output_token_logprobs_offset``). None per request: no
    logprobs asked; None: the target does not report them."""
