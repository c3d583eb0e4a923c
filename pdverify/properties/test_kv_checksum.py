"""X2: the PD KV checksum end to end - prefill's digest, the transfer, decode's verification - for one request.

Both digests must cover exactly what is transferred: prefill's the pages it sends over every chunk of the request,
decode's the pages they land on (decode's metadata named them), each the request's pages for the logical pages of
``[D, n)``, and where the pool registers block scales (``--kv-cache-dtype mxfp8``) those pages' scale items too,
sent with the pages. A page-granular transfer copies every byte both read, so decode must accept the request: a
rejected byte-exact transfer aborts a correct request (a 500), an accepted mismatch would let a bad transfer through;
and neither scheduler may raise (an exception in the scheduler loop takes the server down).
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
    "transfer (a first handoff, or a rebootstrap recomputing prompt + kept outputs); with block scales (mxfp8) each "
    "digest reads the scales of its pages too, every page's scales are sent, and neither side raises",
    needs=("kv_checksum",),
    contract=FROM_KV_CHECKSUM,
    case=checksum_cases(),
)
def test_x2_kv_checksum_end_to_end(target: Target, device: str, case: ChecksumCase) -> None:
    within_release(case)
    trace: ChecksumTrace = target.require("kv_checksum")(case, device)
    note_event("rebootstrap" if case.rebootstrap else "first handoff" + (" past a decode prefix" if case.decode_prefix
                                                                          else ""))  # fmt: skip
    note_event(f"kv cache dtype {case.kv_cache_dtype}")
    assert not trace.raised, f"the handoff raised: {trace.raised}"
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
    assert list(trace.prefill_state_digest) == want_state, (
        f"prefill's digest read block scales {list(trace.prefill_state_digest)}, expected those of its pages "
        f"{want_state}"
    )
    assert list(trace.decode_state_digest) == oracle.decode_state_digest(case), (
        f"decode's digest read block scales {list(trace.decode_state_digest)}, expected those of its pages "
        f"{oracle.decode_state_digest(case)}"
    )
    covered = [p for p in trace.sent_state if p in want_prefill] == want_prefill if case.block_scales else True
    assert covered and (case.block_scales or not trace.sent_state), (
        f"prefill sent block scales {list(trace.sent_state)}; the pages it sends {want_prefill} need theirs "
        f"({'block scales' if case.block_scales else 'no state'} registered)"
    )
    assert trace.accepted, f"decode rejected a byte-exact transfer: {trace.message}"
