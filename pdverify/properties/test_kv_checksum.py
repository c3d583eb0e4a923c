"""X2: the PD KV checksum end to end - prefill's digest, the transfer, decode's verification - for one request.

Both digests must cover exactly what is transferred: prefill's the pages it sends over every chunk of the request,
decode's the pages they land on (decode's metadata named them), each the request's pages for the logical pages of
``[D, n)``. A page-granular transfer copies every byte both read, so decode must accept the request: a rejected
byte-exact transfer aborts a correct request (a 500), an accepted mismatch would let a bad transfer through.
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
    "transfer (a first handoff, or a rebootstrap recomputing prompt + kept outputs)",
    needs=("kv_checksum",),
    contract=FROM_KV_CHECKSUM,
    case=checksum_cases(),
)
def test_x2_kv_checksum_end_to_end(target: Target, device: str, case: ChecksumCase) -> None:
    within_release(case)
    trace: ChecksumTrace = target.require("kv_checksum")(case, device)
    note_event("rebootstrap" if case.rebootstrap else "first handoff" + (" past a decode prefix" if case.decode_prefix
                                                                          else ""))  # fmt: skip
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
    assert trace.accepted, f"decode rejected a byte-exact transfer: {trace.message}"
