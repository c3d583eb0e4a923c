"""The transfer queue's model, strategy and port: validated inputs, clear errors, and the port against the oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument

from pdverify.model.transfer_queue import LLAMA3_EOS, Transfer, TransferQueueCase
from pdverify.oracle import transfer_queue as oracle
from pdverify.production.transfer_queue import transfer_queue
from pdverify.strategies import transfer_queues

T = Transfer(room=0, decode_slot=0, prefill_slot=1, first_token=5)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"room": -1}, "room must be >= 0"),
        ({"room": 2**63}, "room must be <= 2\\*\\*63 - 1"),
        ({"decode_slot": -1}, "decode_slot"),
        ({"first_token": 128256}, "first_token must be < 128256"),
        ({"poll": "done"}, "poll must be one of"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"room": True}, "room must be an integer"),
        ({"top_logprobs": ((-1.0, 3),)}, "need logprob"),
        ({"token_ids_logprob": (3,)}, "need logprob"),
        ({"logprob": -1.0, "top_logprobs": ((-1.0, 3),) * 128257}, "at most 128256 .* got 128257 pairs"),
        ({"logprob": -1.0, "top_logprobs": [(-1.0, 3)]}, "top_logprobs must be a tuple"),
        ({"logprob": -1.0, "top_logprobs": ((-1.0,),)}, "pair"),
        ({"logprob": -1.0, "top_logprobs": ((0.5, 3),)}, "finite float <= 0"),
        ({"logprob": -1.0, "top_logprobs": ((-0.1, 3),)}, "exact in float32"),
        ({"logprob": -1.0, "top_logprobs": ((-1.0, 128256),)}, "token id must be < 128256"),
        ({"logprob": -1.0, "token_ids_logprob": ()}, "non-empty tuple"),
        ({"logprob": -1.0, "token_ids_logprob": (128256,)}, r"token_ids_logprob\[\] must be < 128256"),
        ({"logprob": -1.0, "token_ids_logprob": (-1,)}, r"token_ids_logprob\[\]"),
        ({"consensus": "ready"}, "consensus must be None or one of good, bad, got 'ready'"),
        ({"consensus": "good", "poll": "failed"}, "consensus 'good' .* needs poll 'success', got 'failed'"),
        ({"consensus": "bad", "poll": "transferring"}, "consensus 'bad' .* needs poll 'success' or 'failed'"),
    ],
)
def test_a_transfer_refuses_bad_fields(fields: dict[str, object], names: str) -> None:
    base = {"room": 0, "decode_slot": 0, "prefill_slot": 1, "first_token": 5}
    with pytest.raises(ValueError, match=names):
        Transfer(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("transfers", "slots", "eos", "names"),
    [
        ((T, Transfer(room=1, decode_slot=0, prefill_slot=2, first_token=5)), 4, LLAMA3_EOS, "its own decode_slot"),
        ((T, Transfer(room=1, decode_slot=1, prefill_slot=1, first_token=5)), 4, LLAMA3_EOS, "its own prefill_slot"),
        ((T, Transfer(room=0, decode_slot=1, prefill_slot=2, first_token=5)), 4, LLAMA3_EOS, "its own bootstrap room"),
        ((T,), 1, LLAMA3_EOS, "prefill_slot must be < slots=1"),
        ((T,), 0, LLAMA3_EOS, "slots must be >= 1"),
        ([T], 4, LLAMA3_EOS, "transfers must be a tuple of Transfer"),
        ((T,), 4, (), "eos_token_ids must be None or a non-empty tuple"),
        ((T,), 4, (-1,), "eos_token_ids"),
    ],
)
def test_a_case_refuses_what_no_queue_holds(transfers: object, slots: int, eos: object, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        TransferQueueCase(transfers=transfers, slots=slots, eos_token_ids=eos)  # type: ignore[arg-type]


def test_a_consensus_needs_a_pp_step() -> None:
    agreed = Transfer(room=0, decode_slot=0, prefill_slot=1, first_token=5, consensus="good")
    with pytest.raises(ValueError, match="a transfer's consensus needs pp_step=True"):
        TransferQueueCase(transfers=(agreed,), slots=2)
    with pytest.raises(ValueError, match="pp_step must be a bool, got 1"):
        TransferQueueCase(transfers=(T,), slots=2, pp_step=1)  # type: ignore[arg-type]
    staged = TransferQueueCase(transfers=(agreed,), slots=2, pp_step=True)
    assert staged.input_features() == ("pp_transfer_consensus",)


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"max_transfers": 0}, "max_transfers"),
        ({"max_spare_slots": -1}, "max_spare_slots"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"polls": ("done",)}, "polls"),
        ({"polls": ()}, "polls"),
    ],
)
def test_the_strategy_validates_its_arguments(kwargs: dict[str, object], names: str) -> None:
    with pytest.raises(InvalidArgument, match=names):
        transfer_queues(**kwargs).example()  # type: ignore[arg-type]


def test_a_failed_transfer_is_an_input_feature() -> None:
    failed = TransferQueueCase(transfers=(Transfer(room=3, decode_slot=0, prefill_slot=0, first_token=1,
                                                   poll="failed"),))  # fmt: skip
    assert failed.input_features() == ("transfer_failure_abort",)
    assert TransferQueueCase(transfers=(T,), slots=2).input_features() == ()


seen: set[str] = set()


@settings(max_examples=400, database=None)
@given(transfer_queues())
def test_the_strategy_reaches_every_poll_room_zero_eos_and_one_token(case: TransferQueueCase) -> None:
    for t in case.transfers:
        seen.add(t.poll)
        if t.room == 0 and t.poll == "success":
            seen.add("room 0 done")
        if case.eos_token_ids is not None and t.first_token in case.eos_token_ids:
            seen.add("eos first")
        if t.max_new_tokens == 1:
            seen.add("one token")
        if len(t.top_logprobs) == 128:
            seen.add("top at capacity")
        elif t.top_logprobs:
            seen.add("top logprobs")
        if t.token_ids_logprob is not None:
            seen.add("token ids")
        if t.logprob is not None and not t.top_logprobs and t.token_ids_logprob is None:
            seen.add("logprob only")
    if case.eos_token_ids is None:
        seen.add("no eos")
    for t in case.transfers if case.pp_step else ():
        seen.add(f"pp {t.consensus} {t.poll}" if t.consensus == "bad" else f"pp {t.consensus}")


def test_the_strategy_reached_all_of_it() -> None:
    test_the_strategy_reaches_every_poll_room_zero_eos_and_one_token()
    want = {"success", "transferring", "waiting", "bootstrapping", "failed", "room 0 done", "eos first", "one token",
            "no eos", "top at capacity", "top logprobs", "token ids", "logprob only",
            "pp good", "pp bad success", "pp bad failed", "pp None"}  # fmt: skip
    assert want <= seen, want - seen


@settings(max_examples=200, database=None)
@given(transfer_queues())
def test_the_port_does_what_the_oracle_says(case: TransferQueueCase) -> None:
    trace = transfer_queue(case, "cpu")
    assert list(trace.committed) == oracle.committed(case)
    assert list(trace.tokens) == oracle.tokens(case)
    assert list(trace.aborted) == oracle.aborted(case)
    assert list(trace.queued) == oracle.queued(case)
    assert list(trace.freed) == oracle.freed(case)
    done = list(trace.committed)
    assert trace.logprobs is not None and list(trace.logprobs) == oracle.logprobs(case, done)
    assert trace.cached is not None and list(trace.cached) == oracle.cached(case, done)
    assert trace.top is not None and list(trace.top) == oracle.top_logprobs(case, done)
    assert trace.rows is not None and list(trace.rows) == oracle.rows(case, done)
    assert trace.prefill is not None and list(trace.prefill) == ["admitted"] * len(case.transfers)
    assert not trace.raised


@settings(max_examples=200, database=None)
@given(transfer_queues(max_top_logprobs=256))
def test_the_port_refuses_what_the_row_cannot_hold(case: TransferQueueCase) -> None:
    trace = transfer_queue(case, "cpu")
    assert trace.prefill is not None
    assert [o.split(":")[0] for o in trace.prefill] == oracle.prefill(case)
    kept = [i for i, t in enumerate(case.transfers) if not t.top_beyond_row]
    # a refused request is in none of the pass's lists
    assert set(trace.committed) | set(trace.aborted) | set(trace.queued) <= set(kept)


def test_the_strategy_draws_past_the_row_only_when_asked() -> None:
    with pytest.raises(InvalidArgument, match="max_top_logprobs"):
        transfer_queues(max_top_logprobs=127).example()
    beyond: list[int] = []

    @settings(max_examples=300, database=None)
    @given(transfer_queues(max_top_logprobs=256))
    def draws(case: TransferQueueCase) -> None:
        beyond.extend(len(t.top_logprobs) for t in case.transfers if t.top_beyond_row)

    draws()
    assert beyond and max(beyond) <= 256 and 129 in beyond, sorted(set(beyond))


def test_the_oracle_wants_one_row_per_asked_list() -> None:
    asks = Transfer(room=4, decode_slot=0, prefill_slot=0, first_token=9, logprob=-0.5,
                    top_logprobs=((-0.5, 9), (-1.0, 7)), token_ids_logprob=(1, 2))  # fmt: skip
    plain = Transfer(room=5, decode_slot=1, prefill_slot=1, first_token=3, logprob=-2.0)
    none = Transfer(room=6, decode_slot=2, prefill_slot=2, first_token=3)
    case = TransferQueueCase(transfers=(asks, plain, none), slots=3)
    assert oracle.rows(case, [0, 1, 2]) == [(1, 1, 1), (1, None, None), None]
    assert oracle.top_logprobs(case, [0, 1, 2]) == [((-0.5, 9), (-1.0, 7)), None, None]


def test_the_port_aborts_another_rooms_row() -> None:
    from pdverify.production.transfer_queue import Row, TransferPass

    class Swapped(TransferPass):  # the row of the other request lands in this one's slot
        def row(self, i: int) -> Row:
            return self.rows[self.case.transfers[1 - i].decode_slot]

    case = TransferQueueCase(transfers=(Transfer(room=7, decode_slot=0, prefill_slot=0, first_token=1),
                                        Transfer(room=9, decode_slot=1, prefill_slot=1, first_token=2)))  # fmt: skip
    trace = Swapped(case).run()
    assert (trace.committed, trace.aborted, trace.freed) == ((), (0, 1), (0, 1))
