"""The wire unit on the installed SGLang: decode's real ``MooncakeKVManager.build_receiver_metadata_message``
(called unbound on a stand-in holding ``local_ip``, ``rank_port`` and ``get_session_id``) and prefill's real
``TransferInfo.from_zmq`` on the frames it built."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from pdverify.model.exchange import WireMessage


def sglang_wire_roundtrip(  # pragma: no cover - conformance venv
    pages: npt.NDArray[np.integer], aux_index: int, state: list[list[int]], decode_prefix_len: int
) -> WireMessage:
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager, TransferInfo

    manager: Any = SimpleNamespace(local_ip="10.0.0.2", rank_port=9000, get_session_id=lambda: "session")
    frames = MooncakeKVManager.build_receiver_metadata_message(
        manager,
        bootstrap_room=7,
        required_dst_info_num=1,
        kv_indices=cast(
            "npt.NDArray[np.int32]", pages
        ),  # annotated int32, what decode sends; any dtype is passed as drawn
        aux_index=aux_index,
        state_indices=state,
        decode_prefix_len=decode_prefix_len,
        is_dummy=False,
    )
    info = TransferInfo.from_zmq(frames)
    dst = np.asarray(info.dst_kv_indices)
    return WireMessage(
        tuple(int(p) for p in dst),
        str(dst.dtype),
        info.dst_aux_index,
        tuple(tuple(int(v) for v in s) for s in info.dst_state_indices),
        info.decode_prefix_len,
        bool(info.is_dummy),
    )
