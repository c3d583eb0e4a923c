"""P15-P18 across the two sides: each state list prefill sends with its last transfer pairs up with the list
decode registered for the same state type - equal length, and at every position the same logical page of the
request (prefill's page for it on prefill's row, decode's on decode's row). Also the main KV list: decode's
destination list is as long as the sender's page count and covers the same logical pages from ``D``.

Prefill works from the prefix decode *announced* (``decode_prefix_len`` of its metadata), as it does in a
deployment: decode runs first, and prefill's case takes the D it sent.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pdverify.model.exchange import (
    SWA_WINDOW_TYPES,
    DecodeCase,
    DecodeTrace,
    PrefillCase,
    PrefillTrace,
    WireMessage,
    state_list_start,
)
from pdverify.properties.registry import Clause, applies, note_event, prop, within_domain, within_release
from pdverify.properties.releases import DOMAIN, FROM_MOONCAKE_DECODE_PREFIX, FROM_STATE_LISTS
from pdverify.strategies import pd_exchanges
from pdverify.targets import Target

NEEDS = ("prefill_exchange", "decode_prealloc")


@prop(
    "P18p",
    "each page-strided state list pairs up across prefill and decode: equal length, the same logical page at "
    "each position; decode's main list matches the sender's page count from D",
    needs=NEEDS,
    contract=FROM_STATE_LISTS,
    pair=pd_exchanges(),
)
def test_p18p_state_lists_pair_up(target: Target, device: str, pair: tuple[PrefillCase, DecodeCase]) -> None:
    pre, dec = pair
    within_release(dec, pre)
    got: DecodeTrace = target.require("decode_prealloc")(dec, device)
    d = got.decode_prefix_len
    assert isinstance(d, int) and dec.l1_prefix <= d <= dec.decode_prefix, (
        f"decode announced decode_prefix_len={d}, outside [L1, D] = [{dec.l1_prefix}, {dec.decode_prefix}]"
    )
    if d != pre.decode_prefix:
        note_event("prefill takes the smaller prefix decode announced")
        pre = replace(pre, decode_prefix=d)
    sent: PrefillTrace = target.require("prefill_exchange")(pre, device)
    ps, n = dec.page_size, dec.length
    assert len(got.pages) == sent.num_pages, f"decode registered {len(got.pages)} pages, prefill sends {sent.num_pages}"
    assert sent.transfers and sent.transfers[-1].state is not None, "prefill's last transfer carries no state"
    prefill_state, decode_state = sent.transfers[-1].state, got.state
    assert len(prefill_state) == len(decode_state) == len(dec.state_types), (
        f"{len(prefill_state)} prefill / {len(decode_state)} decode state lists for {dec.state_types}"
    )
    for kind, p_list, d_list in zip(dec.state_types, prefill_state, decode_state, strict=True):
        start = state_list_start(kind, page_size=ps, decode_prefix=d, length=n, window=dec.window)
        if start is None:
            assert len(p_list) == len(d_list), f"{kind}: prefill {len(p_list)} entries, decode {len(d_list)}"
            continue
        note_event(f"paired {kind}")
        assert len(p_list) == len(d_list), f"{kind}: prefill sends {len(p_list)} pages, decode registered {len(d_list)}"
        first = start // ps
        for i, (p_page, d_page) in enumerate(zip(p_list, d_list, strict=True)):
            pos = (first + i) * ps
            assert pos < n, f"{kind}: position {i} is logical page {first + i}, past L={n}"
            # an SWA list names prefill's SWA pool's page of the logical page where it has one of its own
            own = pre.swa_pages if kind in SWA_WINDOW_TYPES and pre.swa_pages is not None else None
            assert p_page == (pre.row[pos] // ps if own is None else own[first + i]), (
                f"{kind}[{i}]: prefill page {p_page} is not its logical page {first + i}"
            )
            assert d_page == decode_page(dec, got, kind, pos), (
                f"{kind}[{i}]: decode page {d_page} is not its logical page {first + i}"
            )


def decode_page(dec: DecodeCase, got: DecodeTrace, kind: str, pos: int) -> int | None:
    """Decode's page for position ``pos`` in a list of ``kind``: its SWA buffer's (what the allocator holds for the
    SWA span, None outside it) for an SWA-window list on a hybrid SWA pool, else its request row's."""
    if kind not in SWA_WINDOW_TYPES or dec.swa_free_pages is None:
        return got.row[pos] // dec.page_size
    return got.swa_page(pos, dec.page_size)


@prop(
    "X1",
    "the two sides joined through the real wire: what decode's pre-allocation sends (pages, aux index, state lists, "
    "prefix), parsed back by prefill's wire code, is what prefill's exchange consumes - prefill starts from the "
    "parsed prefix, its sends land on the parsed destination list once each and in order, each destination is "
    "decode's page for the logical page prefill sends there, and its final state lists pair up with the parsed ones",
    needs=("decode_prealloc", "wire_roundtrip", "prefill_exchange"),
    clauses=(
        Clause("exchange", title="pages and aux index through the wire; prefill's sends land on them"),
        Clause("decode_prefix", FROM_MOONCAKE_DECODE_PREFIX, "the decode prefix through the wire, prefill from it"),
        Clause("state_lists", FROM_STATE_LISTS, "prefill's final state lists pair up with the parsed ones"),
    ),
    pair=pd_exchanges(),
)
def test_x1_exchange_through_the_wire(target: Target, device: str, pair: tuple[PrefillCase, DecodeCase]) -> None:
    pre, dec = pair
    within_release(dec, pre)
    # before #24257 (0.5.12) the wire driven here (Mooncake's) carries no decode prefix: 0.5.11's server sends a
    # request with one over NIXL's
    within_domain(applies("decode_prefix") or not dec.decode_prefix, "a decode prefix over Mooncake's wire")
    got: DecodeTrace = target.require("decode_prealloc")(dec, device)
    announced = got.decode_prefix_len if isinstance(got.decode_prefix_len, int) else 0
    msg: WireMessage = target.require("wire_roundtrip")(
        # in the dtype the release's decode puts on the wire (int32 from #7214, int64 before)
        np.asarray(got.pages, dtype=DOMAIN.wire_page_dtype),
        got.aux_index,
        [list(s) for s in got.state],
        announced,
    )
    assert (list(msg.pages), msg.aux_index, msg.decode_prefix_len) == (list(got.pages), got.aux_index, announced), (
        f"decode sent pages {list(got.pages)}, aux {got.aux_index}, prefix {announced}; prefill read "
        f"{list(msg.pages)}, {msg.aux_index}, {msg.decode_prefix_len}"
    )
    d, ps = announced, dec.page_size  # what the wire carried (asserted equal above)
    sent: PrefillTrace = target.require("prefill_exchange")(replace(pre, decode_prefix=d), device)
    assert sent.num_pages == len(msg.pages), (
        f"prefill announces {sent.num_pages} pages for {len(msg.pages)} destinations"
    )
    landed = [pos for t in sent.transfers for pos in t.destinations]
    assert landed == list(range(len(msg.pages))), f"prefill's sends land on {landed} of {len(msg.pages)} destinations"

    def prefill_page(logical: int) -> int:
        page = pre.row[logical * ps] // ps
        return pre.translation[page] if pre.translation is not None else page

    for t in sent.transfers:
        for pos, page in zip(t.destinations, t.pages, strict=True):
            logical = d // ps + pos
            assert msg.pages[pos] == got.row[logical * ps] // ps, (
                f"destination {pos} is decode page {msg.pages[pos]}, not decode's logical page {logical}"
            )
            assert page == prefill_page(logical), f"prefill sends page {page} to destination {pos} (logical {logical})"
    if d:
        note_event("a decode prefix through the wire")
    if not applies("state_lists"):  # one state payload, or none, before the per-type lists (#24932, 0.5.12)
        return
    final = sent.transfers[-1].state if sent.transfers else None
    assert final is not None and len(final) == len(msg.state) == len(dec.state_types), (
        f"prefill's final state {final}, parsed {list(msg.state)}, for {dec.state_types}"
    )
    for kind, p_list, d_list in zip(dec.state_types, final, msg.state, strict=True):
        assert len(p_list) == len(d_list), (
            f"{kind}: prefill sends {len(p_list)} entries, decode registered {len(d_list)}"
        )
