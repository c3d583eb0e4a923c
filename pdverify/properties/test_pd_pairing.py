"""P15-P18 across the two sides: each state list prefill sends with its last transfer pairs up with the list
decode registered for the same state type - equal length, and at every position the same logical page of the
request (prefill's page for it on prefill's row, decode's on decode's row). Also the main KV list: decode's
destination list is as long as the sender's page count and covers the same logical pages from ``D``.

Prefill works from the prefix decode *announced* (``decode_prefix_len`` of its metadata), as it does in a
deployment: decode runs first, and prefill's case takes the D it sent.
"""

from __future__ import annotations

from dataclasses import replace

from pdverify.model.exchange import DecodeCase, DecodeTrace, PrefillCase, PrefillTrace, state_list_start
from pdverify.properties.registry import note_event, prop, within_release
from pdverify.strategies import pd_exchanges
from pdverify.targets import Target

NEEDS = ("prefill_exchange", "decode_prealloc")


@prop(
    "P18p",
    "each page-strided state list pairs up across prefill and decode: equal length, the same logical page at "
    "each position; decode's main list matches the sender's page count from D",
    needs=NEEDS,
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
            assert p_page == pre.row[pos] // ps, (
                f"{kind}[{i}]: prefill page {p_page} is not its logical page {first + i}"
            )
            assert d_page == got.row[pos] // ps, (
                f"{kind}[{i}]: decode page {d_page} is not its logical page {first + i}"
            )
