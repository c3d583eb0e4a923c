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
from pdverify.properties.registry import note_event, prop
from pdverify.strategies.sender import bootstrap_cases, sender_cases
from pdverify.targets import Target


@example(case=SenderCase(6, 7, ((5, 2), (9,), (3, 8, 6)), ((11, 12), ())))
@example(case=SenderCase(0, 7, ((),), ((4,),)))
@prop(
    "K1",
    "the KV sender places each send at dst[curr, curr + n), flags the send that reaches its initialised count last "
    "(that one only) and forwards aux and the state lists with it only",
    needs=("kv_sender",),
    case=sender_cases(),
)
def test_k1_sender_gates_the_last_transfer(target: Target, device: str, case: SenderCase) -> None:
    trace: SenderTrace = target.require("kv_sender")(case, device)
    note_event(f"sends: {len(case.sends)}")
    assert len(trace.transfers) == len(case.sends), f"{len(trace.transfers)} transfers for {len(case.sends)} sends"
    at = 0
    for k, (t, pages) in enumerate(zip(trace.transfers, case.sends, strict=True)):
        final = k == len(case.sends) - 1
        assert t.pages == pages and t.destinations == tuple(range(at, at + len(pages))), (
            f"send {k}: {list(t.pages)} at {list(t.destinations)}, expected {list(pages)} at [{at}, {at + len(pages)})"
        )
        at += len(pages)
        assert t.is_last == final, f"send {k} flagged last={t.is_last}, the final send is {len(case.sends) - 1}"
        want_aux = case.aux_index if final else None
        want_state = tuple(case.state) if final else None
        assert t.aux_index == want_aux and t.state == want_state, (
            f"send {k}: aux {t.aux_index} state {t.state}, expected {want_aux} {want_state}"
        )


@example(case=BootstrapCase(4, 23, 4))
@example(case=BootstrapCase(4, 20, 20, room=2**33))
@prop(
    "K2",
    "bootstrap finalisation pops decode's prefix D for the room, starts sending at D and initialises the sender with "
    "ceil((L - D) / page_size) pages and the request's metadata buffer",
    needs=("bootstrap",),
    case=bootstrap_cases(),
)
def test_k2_bootstrap_finalisation(target: Target, device: str, case: BootstrapCase) -> None:
    trace: BootstrapTrace = target.require("bootstrap")(case, device)
    pages = -(-(case.length - case.decode_prefix) // case.page_size)
    assert trace.finalized, "finalize_bootstrap did not finish with a free metadata buffer"
    assert trace.start_send_idx == case.decode_prefix, f"start_send_idx {trace.start_send_idx}, D={case.decode_prefix}"
    assert trace.num_pages == pages, f"sender initialised with {trace.num_pages} pages, expected {pages}"
    assert trace.aux_index == case.aux_index, f"aux {trace.aux_index}, the request's buffer is {case.aux_index}"
    assert not trace.prefix_left, "decode's prefix for the room was read but not popped"
