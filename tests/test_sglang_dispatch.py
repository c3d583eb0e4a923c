"""Q9's driver runs SGLang's own ``TokenizerManager.generate_request``: the release's normalisation, tokenisation and
``_handle_batch_request`` decide what reaches the scheduler. A room planted one off in the normalisation makes Q9
fail; as released, parallel samples share their prompt's room (F10, 0.4.5.post3 on).

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped where
SGLang is not installed or its generate requests carry no bootstrap room (before 0.4.5.post1).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from unittest import mock

import pytest

from pdverify.model.dispatch import GenerateCall

GenerateReqInput = pytest.importorskip("sglang.srt.managers.io_struct", reason="needs SGLang").GenerateReqInput

if "bootstrap_room" not in {f.name for f in dataclasses.fields(GenerateReqInput)}:
    pytest.skip("the release's requests carry no bootstrap room (before 0.4.5.post1)", allow_module_level=True)

BATCH = GenerateCall(prompts=((791, 1217), (9906, 11, 1917), (128000,)), single=False, room=(2**31 - 2, 0, 2**63 - 1))
"""A batch of three prompts as mini_lb sends it: a room per prompt (the gRPC router's last, 0, the last of all)."""
CHAT_N3 = GenerateCall(prompts=((128000, 9906),), single=True, n=3, room=(2**31 - 2), max_new_tokens=100)


def _target() -> Any:
    from pdverify.targets import load_target

    return load_target("sglang")


def _q9(call: GenerateCall) -> None:
    from pdverify.properties.test_dispatch import test_q9_dispatch_rooms

    test_q9_dispatch_rooms.hypothesis.inner_test(_target(), "cpu", call)  # type: ignore[attr-defined]


def test_the_dispatch_runs_sglangs_own_generate_request() -> None:
    import sglang.srt.managers.tokenizer_manager as tm
    from packaging.version import Version

    if Version(_target().release) < Version("0.4.5.post3"):
        pytest.skip("a batch's requests carry no bootstrap fields before #5531 (0.4.5.post3): T31")

    entered: list[str] = []
    tokenize = tm.TokenizerManager._tokenize_one_request

    async def spy(self: Any, obj: Any, *args: Any, **kw: Any) -> Any:
        entered.append(obj.rid)
        return await tokenize(self, obj, *args, **kw)

    with mock.patch.object(tm.TokenizerManager, "_tokenize_one_request", spy):
        trace = _target().require("generate_dispatch")(BATCH, "cpu")
    assert len(entered) == 3, entered
    assert not trace.raised, trace.raised
    assert [(d.prompt, d.room, d.max_new_tokens) for d in trace.sent] == [
        (0, 2**31 - 2, 16), (1, 0, 16), (2, 2**63 - 1, 16)
    ], trace  # fmt: skip
    _q9(BATCH)


def test_attention_dp_sends_a_batch_one_request_at_a_time() -> None:
    """A batch of token-id prompts goes to the scheduler as one batch, and one request at a time with attention DP on
    the server (``_handle_batch_request``'s sequential path, 0.5.5.post1 on; to 0.5.3.post3 every batch takes it,
    0.5.4-0.5.5 none of id prompts): both forms are driven, with the rooms Q9 asks for."""
    import inspect

    import sglang.srt.managers.tokenizer_manager as tm
    from packaging.version import Version

    if Version(_target().release) < Version("0.4.5.post3"):
        pytest.skip("a batch's requests carry no bootstrap fields before #5531 (0.4.5.post3): T31")
    gate = getattr(tm.TokenizerManager, "_should_use_batch_tokenization", None)
    source = inspect.getsource(gate) if gate is not None else ""
    ids_batched = "_batch_has_text" in source  # a batch of id prompts goes as one batch (0.5.4 on) ...
    dp_sequential = "enable_dp_attention" in source or "attn_dp_enabled" in source  # ... but with DP (0.5.5.post1)
    one = tm.TokenizerManager._send_one_request
    sent: list[str] = []

    async def spy_async(self: Any, *args: Any, **kw: Any) -> Any:
        sent.append("one")
        return await one(self, *args, **kw)

    def spy_sync(self: Any, *args: Any, **kw: Any) -> Any:
        sent.append("one")
        return one(self, *args, **kw)

    spy = spy_async if inspect.iscoroutinefunction(one) else spy_sync
    for attention_dp in (False, True):
        sent.clear()
        call = dataclasses.replace(BATCH, attention_dp=attention_dp)
        with mock.patch.object(tm.TokenizerManager, "_send_one_request", spy):
            trace = _target().require("generate_dispatch")(call, "cpu")
        assert [(d.prompt, d.room) for d in trace.sent] == [(0, 2**31 - 2), (1, 0), (2, 2**63 - 1)], trace
        sequential = not ids_batched or (attention_dp and dp_sequential)
        assert len(sent) == (3 if sequential else 0), (attention_dp, sent)
        _q9(call)


def test_q9_fails_when_the_normalisation_moves_a_room() -> None:
    normalize = GenerateReqInput.normalize_batch_and_arguments

    def one_off(self: Any) -> None:
        normalize(self)
        if isinstance(self.bootstrap_room, list):
            self.bootstrap_room = [r + 1 for r in self.bootstrap_room]

    with (
        mock.patch.object(GenerateReqInput, "normalize_batch_and_arguments", one_off),
        pytest.raises(AssertionError, match="the router gave them"),
    ):
        _q9(BATCH)


def test_parallel_samples_share_their_prompts_room_as_released() -> None:
    from packaging.version import Version

    if Version(_target().release) < Version("0.5.2"):
        pytest.skip("one room for parallel samples is #10236's (0.5.2 on)")
    trace = _target().require("generate_dispatch")(CHAT_N3, "cpu")
    assert [d.room for d in trace.samples()] == [2**31 - 2] * 3, trace
    with pytest.raises(AssertionError, match="carried by more than one"):
        _q9(CHAT_N3)
