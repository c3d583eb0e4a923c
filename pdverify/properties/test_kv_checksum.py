"""X2: the PD KV checksum end to end - prefill's digest, the transfer, decode's verification - for one request.

Both digests must cover exactly what is transferred: prefill's the pages it sends over every chunk of the request,
decode's the pages they land on (decode's metadata named them), each the request's pages for the logical pages of
``[D, n)``, and each state item the pool registers as it is sent: block scales (``--kv-cache-dtype mxfp8``) with the
pages they scale, a hybrid SWA pool's SWA KV (and its scales) by each side's SWA pages over the window. A
page-granular transfer copies every byte both read, so decode must accept the request: a rejected byte-exact
transfer aborts a correct request (a 500), an accepted mismatch would let a bad transfer through; and neither
scheduler may raise (an exception in the scheduler loop takes the server down).
"""

from __future__ import annotations

from pdverify.model.checksum import ChecksumCase, ChecksumTrace
from pdverify.oracle import checksum as oracle
from pdverify.properties.registry import note_event, prop, within_release
from pdverify.properties.releases import FROM_KV_CHECKSUM
from pdverify.strategies import checksum_cases
from pdverify.targets import Target


@prop(
    "X2",
    "the KV checksum end to end: prefill's digest reads exactly the pages it sends over the request's chunks, "
    "decode's exactly the pages they land on - each side's pages of [D, n) - and decode accepts the byte-exact "
    "transfer (a first handoff, or a rebootstrap recomputing prompt + kept outputs); each registered state type (mxfp8 "
    "block scales, a hybrid SWA pool's window) is digested by its own payload's items, all of them sent, neither "
    "side raises, and decode commits the transfer once prefill's metadata row has landed, whatever the room",
    needs=("kv_checksum",),
    contract=FROM_KV_CHECKSUM,
    case=checksum_cases(),
)
def test_x2_kv_checksum_end_to_end(target: Target, device: str, case: ChecksumCase) -> None:
    within_release(case)
    trace: ChecksumTrace = target.require("kv_checksum")(case, device)
    note_event("rebootstrap" if case.rebootstrap else "first handoff" + (" past a decode prefix" if case.decode_prefix
                                                                          else ""))  # fmt: skip
    note_event(f"kv cache dtype {case.kv_cache_dtype}" + (", hybrid SWA" if case.sliding_window else ""))
    note_event("bootstrap room 0" if case.bootstrap_room == 0 else "a bootstrap room past 0")
    assert not trace.raised, f"the handoff raised: {trace.raised}"
    assert trace.committed, (
        f"decode never committed the transfer of the request in room {case.bootstrap_room} (prefill's slot "
        f"{case.prefill_aux_index}, decode's {case.decode_aux_index}): {trace.message}"
    )
    want_prefill, want_decode = oracle.prefill_digest(case), oracle.decode_digest(case)
    assert list(trace.sent) == want_prefill, (
        f"prefill sent pages {list(trace.sent)}, expected its pages of [D, n) = {want_prefill}"
    )
    assert list(trace.destinations) == want_decode, (
        f"decode's destinations {list(trace.destinations)}, expected its pages of [D, n) = {want_decode}"
    )
    assert list(trace.prefill_digest) == want_prefill, (
        f"prefill's digest read pages {list(trace.prefill_digest)}, not the pages it sent {want_prefill}"
    )
    assert list(trace.decode_digest) == want_decode, (
        f"decode's digest read pages {list(trace.decode_digest)}, not the pages the transfer landed on {want_decode}"
    )
    want_state = oracle.prefill_state_digest(case)
    for side, got, want in (
        ("prefill", trace.prefill_state_digest, want_state),
        ("decode", trace.decode_state_digest, oracle.decode_state_digest(case)),
    ):
        assert [kind for kind, _ in got] == [kind for kind, _ in want], (
            f"{side}'s digest covered state types {[k for k, _ in got]}; the pool registers {[k for k, _ in want]}"
        )
        for (kind, items), (_, expected) in zip(got, want, strict=True):
            assert list(items) == expected, (
                f"{side}'s digest read {kind} items {list(items)}, expected those its {kind} payload carries for "
                f"the digested range: {expected}"
            )
    sent_state = dict(trace.sent_state)
    for kind, expected in want_state:
        carried = list(sent_state.get(kind, ()))
        assert [p for p in carried if p in expected] == expected, (
            f"prefill sent {kind} items {carried}; the items it digests {expected} must all be sent"
        )
    assert trace.accepted, f"decode rejected a byte-exact transfer: {trace.message}"
