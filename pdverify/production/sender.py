"""The KV sender and bootstrap finalisation as units: pdverify's ports (``prefill_sender.CommonSender`` and the
bootstrap step of ``prefill_sender.prefill_exchange``) driven on their own."""

from __future__ import annotations

import numpy as np

from pdverify.model.sender import BootstrapCase, BootstrapTrace, SenderCase, SenderTrace
from pdverify.production import prefill_sender
from pdverify.production.page_index import PageIndices, kv_to_page_num


def kv_sender(case: SenderCase, device: str) -> SenderTrace:
    """``init`` then every send in order, the state lists passed with each (the sender gates them)."""
    sender = prefill_sender.CommonSender()
    sender.init(case.num_pages, case.aux_index)
    state: list[PageIndices] = [np.array(s, dtype=np.int32) for s in case.state]
    for pages in case.sends:
        sender.send(np.array(pages, dtype=np.int32), state, num_kv_tokens=len(pages))
    return SenderTrace(sender.transfers)


def bootstrap(case: BootstrapCase, device: str) -> BootstrapTrace:
    """``finalize_bootstrap``: pop ``D`` for the room, start sending at ``D``, initialise the sender with
    ``ceil((L - D) / page_size)`` pages and the request's metadata buffer."""
    prefixes = {case.room: case.decode_prefix}
    d = prefixes.pop(case.room, 0)
    return BootstrapTrace(
        True, d, kv_to_page_num(case.length - d, case.page_size), case.aux_index, case.room in prefixes
    )
