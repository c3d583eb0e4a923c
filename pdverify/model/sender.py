"""The KV sender and bootstrap finalisation as units of their own (SGLang's ``CommonKVSender`` and
``PrefillBootstrapQueue.finalize_bootstrap``), apart from the scheduler that drives them.

A ``SenderCase`` is one request's sender: the page count it is initialised with, its aux index (metadata buffer),
the page lists the scheduler hands it in order (summing to the count), and the state lists the scheduler passes
with every send (the sender must forward them - and aux - with the last transfer only). A ``BootstrapCase`` is one
request at bootstrap: its prompt length, page size, the decode prefix ``D`` decode registered for the room, and
the metadata buffer the request holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdverify.model.exchange import Transfer
from pdverify.validation import require_int, require_page_size


@dataclass(frozen=True)
class SenderCase:
    num_pages: int
    aux_index: int
    sends: tuple[tuple[int, ...], ...]
    state: tuple[tuple[int, ...], ...] = ()

    def input_features(self) -> tuple[str, ...]:
        """The input features the case uses that came with a release (``pdverify.properties.releases.FEATURES``):
        state lists came with hybrid-model state payloads."""
        return ("state_payloads",) if self.state else ()

    def __post_init__(self) -> None:
        require_int("num_pages", self.num_pages, minimum=0)
        require_int("aux_index", self.aux_index, minimum=0)
        if not self.sends:
            raise ValueError("sends must hold at least the last send")
        if sum(len(s) for s in self.sends) != self.num_pages:
            raise ValueError(
                f"sends carry {sum(len(s) for s in self.sends)} pages, the sender expects {self.num_pages}"
            )


@dataclass
class SenderTrace:
    transfers: list[Transfer]


@dataclass(frozen=True)
class BootstrapCase:
    page_size: int
    length: int
    decode_prefix: int
    aux_index: int = 7
    room: int = 4242

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        require_int("length", self.length, minimum=0)
        require_int("aux_index", self.aux_index, minimum=0)
        require_int("room", self.room, minimum=0)
        if not 0 <= self.decode_prefix <= self.length or self.decode_prefix % self.page_size:
            raise ValueError(f"decode_prefix={self.decode_prefix} must be page-aligned and in [0, length]")


@dataclass
class BootstrapTrace:
    finalized: bool
    start_send_idx: int
    num_pages: int
    aux_index: int | None
    prefix_left: bool
    """Whether the KV manager still holds a decode prefix for the room afterwards (it must be popped)."""
