"""X2's metadata rows are SGLang's own on both sides (0.5.21 on): prefill's ``set_buf`` writes the request's row into
real ``MetadataBuffers``, SGLang's ``MooncakeKVManager.send_aux`` copies it into decode's slot, and decode's real
``pop_transferred`` commits the request once the row has landed. A row planted to go to the wrong slot, or written
with another room, makes X2 fail on a request outside room 0; as released, room 0 is F8 (the gate's sentinel).

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed or the release has no KV checksum (X2's unit).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

utils = pytest.importorskip("sglang.srt.disaggregation.utils", reason="needs SGLang (the conformance env)")
if not hasattr(utils.MetadataBuffers, "set_kv_checksum"):
    pytest.skip("the release has no KV checksum (before 0.5.21)", allow_module_level=True)

from pdverify.model.checksum import ChecksumCase  # noqa: E402

CASE = ChecksumCase(page_size=4, prompt=9, prefill_pages=(5, 2, 7), decode_pages=(3, 6, 1), chunk_ends=(4, 9),
                    bootstrap_room=2**31 - 2, prefill_aux_index=1, decode_aux_index=2)  # fmt: skip


def _x2(case: ChecksumCase) -> None:
    from pdverify.properties.test_kv_checksum import test_x2_kv_checksum_end_to_end
    from pdverify.targets import load_target

    test_x2_kv_checksum_end_to_end.hypothesis.inner_test(load_target("sglang"), "cpu", case)  # type: ignore[attr-defined]


def test_the_row_travels_through_sglangs_own_buffers_and_aux_transfer() -> None:
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager

    from pdverify.targets import load_target

    rooms: list[int] = []
    sends: list[tuple[int, int]] = []
    set_buf, send_aux = utils.MetadataBuffers.set_buf, MooncakeKVManager.send_aux

    def spy_set_buf(self: Any, req: Any) -> None:
        rooms.append(req.bootstrap_room)
        set_buf(self, req)

    def spy_send_aux(self: Any, req: Any, prefill_aux_index: int, dst_aux_ptrs: list[int]) -> Any:
        sends.append((prefill_aux_index, req.dst_aux_index))
        return send_aux(self, req, prefill_aux_index, dst_aux_ptrs)

    with (
        mock.patch.object(utils.MetadataBuffers, "set_buf", spy_set_buf),
        mock.patch.object(MooncakeKVManager, "send_aux", spy_send_aux),
    ):
        trace = load_target("sglang").require("kv_checksum")(CASE, "cpu")
    assert trace.committed and trace.accepted, trace
    assert (rooms, sends) == ([2**31 - 2], [(1, 2)])


def test_x2_fails_when_the_aux_transfer_lands_in_another_slot() -> None:
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager

    send_aux = MooncakeKVManager.send_aux

    def next_slot(self: Any, req: Any, prefill_aux_index: int, dst_aux_ptrs: list[int]) -> Any:
        req.dst_aux_index += 1
        return send_aux(self, req, prefill_aux_index, dst_aux_ptrs)

    with (
        mock.patch.object(MooncakeKVManager, "send_aux", next_slot),
        pytest.raises(AssertionError, match="decode never committed the transfer of the request in room 2147483646"),
    ):
        _x2(CASE)


def test_x2_fails_when_prefill_writes_another_room() -> None:
    set_buf = utils.MetadataBuffers.set_buf

    def other_room(self: Any, req: Any) -> None:
        set_buf(self, req)
        self.bootstrap_room[req.metadata_buffer_index, 0] = 7

    with (
        mock.patch.object(utils.MetadataBuffers, "set_buf", other_room),
        pytest.raises(AssertionError, match=r"decode never committed .* decode aborted the request: Metadata corrupt"),
    ):
        _x2(CASE)


def test_room_zero_is_f8_as_released() -> None:
    from dataclasses import replace

    with pytest.raises(AssertionError, match=r"room 0 .*still in DecodeTransferQueue\.queue"):
        _x2(replace(CASE, bootstrap_room=0))
