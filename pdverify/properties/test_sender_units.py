"""The KV sender and bootstrap finalisation as units of their own (SGLang's ``CommonKVSender`` and
``PrefillBootstrapQueue.finalize_bootstrap``).

K1: the sender places each send at ``dst[curr, curr + n)``, flags the send that reaches its initialised count as
the last - that one only - and forwards aux and the state lists with it only, though the scheduler passes them
with every send here. K2: bootstrap finalisation pops decode's prefix ``D`` for the room, starts sending at ``D``
and initialises the sender with ``ceil((L - D) / page_size)`` pages and the request's metadata buffer.
"""

from __future__ import annotations

from hypothesis import example

from pdverify.model.sender import BootstrapCase, BootstrapTrace, SenderCase, SenderTrace
from pdverify.properties.registry import Clause, applies, note_event, prop, within_domain, within_release
from pdverify.properties.releases import DECODE_PREFIXES, DOMAIN, FROM_SENDER_TRACKS, FROM_STATE_PAYLOADS
from pdverify.strategies.sender import bootstrap_cases, sender_cases
from pdverify.targets import Target


@example(case=SenderCase(6, 7, ((5, 2), (9,), (3, 8, 6)), ((11, 12), ())))
@example(case=SenderCase(0, 7, ((),), ((4,),)))
@prop(
    "K1",
    "the KV sender places each send at dst[curr, curr + n), flags the send that reaches its initialised count last "
    "(that one only) and forwards aux and the state lists with it only",
    clauses=(
        Clause("placement", FROM_SENDER_TRACKS, "each send's pages at dst[curr, curr + n)"),
        Clause(
            "last_flag", FROM_SENDER_TRACKS, "the send that reaches the initialised count is the last, that one only"
        ),
        Clause("aux", title="aux goes with the last send only"),
        Clause("state_lists", FROM_STATE_PAYLOADS, "the state lists go with the last send only"),
    ),
    needs=("kv_sender",),
    case=sender_cases(),
)
def test_k1_sender_gates_the_last_transfer(target: Target, device: str, case: SenderCase) -> None:
    within_release(case)
    trace: SenderTrace = target.require("kv_sender")(case, device)
    note_event(f"sends: {len(case.sends)}")
    assert len(trace.transfers) == len(case.sends), f"{len(trace.transfers)} transfers for {len(case.sends)} sends"
    at = 0
    for k, (t, pages) in enumerate(zip(trace.transfers, case.sends, strict=True)):
        final = k == len(case.sends) - 1
        if applies("placement"):
            assert t.pages == pages and t.destinations == tuple(range(at, at + len(pages))), (
                f"send {k}: {list(t.pages)} at {list(t.destinations)}, expected {list(pages)} at "
                f"[{at}, {at + len(pages)})"
            )
        at += len(pages)
        if applies("last_flag"):
            assert t.is_last == final, f"send {k} flagged last={t.is_last}, the final send is {len(case.sends) - 1}"
        if applies("aux"):
            want_aux = case.aux_index if final else None
            assert t.aux_index == want_aux, f"send {k}: aux {t.aux_index}, expected {want_aux}"
        if applies("state_lists"):
            want_state = tuple(case.state) if final else None
            assert t.state == want_state, f"send {k}: state {t.state}, expected {want_state}"


@example(case=BootstrapCase(4, 23, 4))
@example(case=BootstrapCase(4, 20, 20, room=2**33))
@prop(
    "K2",
    "bootstrap finalisation pops decode's prefix D for the room, starts sending at D and initialises the sender with "
    "ceil((L - D) / page_size) pages and the request's metadata buffer",
    clauses=(
        Clause("finalized", title="bootstrap completes once a metadata buffer is free"),
        Clause("pages", title="the sender is initialised with ceil((L - D) / page_size) pages"),
        Clause("buffer", title="the sender is initialised with the request's metadata buffer"),
        Clause("start_at_prefix", DECODE_PREFIXES, "sending starts at decode's prefix D"),
        Clause("prefix_popped", DECODE_PREFIXES, "decode's prefix for the room is popped, not only read"),
    ),
    needs=("bootstrap",),
    case=bootstrap_cases(),
)
def test_k2_bootstrap_finalisation(target: Target, device: str, case: BootstrapCase) -> None:
    within_domain(DOMAIN.decode_prefix or case.decode_prefix == 0, "a decode-side prefix (D > 0)")
    within_domain(DOMAIN.has("paged_transfer") or case.page_size == 1, "a page size above 1 (paged transfer)")
    trace: BootstrapTrace = target.require("bootstrap")(case, device)
    pages = -(-(case.length - case.decode_prefix) // case.page_size)
    if applies("finalized"):
        assert trace.finalized, "bootstrap did not finish with a free metadata buffer"
    if applies("pages"):
        assert trace.num_pages == pages, f"sender initialised with {trace.num_pages} pages, expected {pages}"
    if applies("buffer"):
        assert trace.aux_index == case.aux_index, f"aux {trace.aux_index}, the request's buffer is {case.aux_index}"
    if applies("start_at_prefix"):
        assert trace.start_send_idx == case.decode_prefix, (
            f"start_send_idx {trace.start_send_idx}, D={case.decode_prefix}"
        )
    if applies("prefix_popped"):
        assert not trace.prefix_left, "decode's prefix for the room was read but not popped"
