"""The wire unit on the installed SGLang: decode's metadata frames as the release builds them, parsed back by
prefill's real ``TransferInfo.from_zmq``.

The frames come from the release's own code: ``MooncakeKVManager.build_receiver_metadata_message`` (0.5.23; called
unbound on a stand-in holding ``local_ip``, ``rank_port`` and ``get_session_id``), or - before it existed - the
``MooncakeKVReceiver.send_metadata`` (``init`` before 0.5.10) that built them inline (0.4.5.post1-0.5.22), called
unbound on a stand-in receiver with one prefill peer whose socket records the frames it is sent (the receiver
connects through ``_connect_to_bootstrap_server`` from 0.4.9.post4, through ``_connect`` before). State lists are
sent where the release packs one list per state type (0.5.12 on); the decode prefix where the method takes it.
"""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import numpy as np
import numpy.typing as npt

from pdverify.model.exchange import WireMessage


def _receiver_frames(  # pragma: no cover - conformance venv
    receiver_class: Any, pages: Any, aux_index: int, state: list[list[int]], decode_prefix_len: int
) -> list[bytes]:
    """The frames ``MooncakeKVReceiver.send_metadata`` sends its one (real) prefill peer."""
    sent: list[list[bytes]] = []

    class Socket:
        def send_multipart(self, frames: list[bytes]) -> None:
            sent.append(list(frames))

    class Connection(tuple[Any, ...]):
        """What ``_connect`` returns: ``(socket, lock)`` from 0.4.5.post2, the socket itself on 0.4.5.post1."""

        def send_multipart(self, frames: list[bytes]) -> None:
            self[0].send_multipart(frames)

    # the registered buffers' addresses, which 0.4.5.post1-0.4.6.post4 send with every message (the manager's kv_args)
    kv_args = SimpleNamespace(kv_data_ptrs=[1 << 40], aux_data_ptrs=[1 << 41], engine_rank=0)
    manager = SimpleNamespace(local_ip="10.0.0.2", rank_port=9000, enable_staging=False, kv_args=kv_args,
                              record_failure=lambda *a: None, update_status=lambda *a: None)  # fmt: skip
    peer = {"is_dummy": False, "rank_ip": "10.0.0.3", "rank_port": 9001}
    receiver: Any = SimpleNamespace(
        bootstrap_infos=[peer],
        bootstrap_info=peer,  # the one prefill peer before 0.4.6.post5
        bootstrap_room=7,
        bootstrap_addr="10.0.0.3:8998",
        kv_mgr=manager,
        session_id="session",
        required_dst_info_num=1,
        _connect_to_bootstrap_server=lambda info: (Socket(), contextlib.nullcontext()),
        _connect=lambda endpoint: Connection((Socket(), contextlib.nullcontext())),  # to 0.4.9.post3: per endpoint
        invalidate_cached_bootstrap_infos=lambda: None,
    )
    # the method that sends the metadata: send_metadata (0.5.10 on), init before it
    method = getattr(receiver_class, "send_metadata", None) or receiver_class.init
    params = inspect.signature(method).parameters
    kw: dict[str, Any] = {}
    if "state_indices" in params:
        # one list per state type where the release packs lists (pack_int_lists, 0.5.12 on); the flat single
        # list before is another payload, not sent here
        kw["state_indices"] = state if "pack_int_lists" in inspect.getsource(method) else None
    if "decode_prefix_len" in params:
        kw["decode_prefix_len"] = decode_prefix_len
    from sglang.srt.disaggregation.mooncake import conn

    # the decode host's own address, which releases before 0.4.8 read with a probe of the network (the manager's after)
    with mock.patch.object(conn, "get_local_ip_by_remote", lambda *a: "10.0.0.2", create=True):
        method(receiver, pages, aux_index, **kw)
    assert len(sent) == 1, f"{method.__qualname__} sent {len(sent)} messages to one prefill peer"
    return sent[0]


def sglang_wire_roundtrip(  # pragma: no cover - conformance venv
    pages: npt.NDArray[np.integer], aux_index: int, state: list[list[int]], decode_prefix_len: int
) -> WireMessage:
    from sglang.srt.disaggregation.mooncake import conn

    manager_class: Any = conn.MooncakeKVManager
    if hasattr(manager_class, "build_receiver_metadata_message"):
        manager: Any = SimpleNamespace(local_ip="10.0.0.2", rank_port=9000, get_session_id=lambda: "session")
        frames = manager_class.build_receiver_metadata_message(
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
    else:
        frames = _receiver_frames(conn.MooncakeKVReceiver, pages, aux_index, state, decode_prefix_len)
    info = conn.TransferInfo.from_zmq(frames)
    dst = np.asarray(info.dst_kv_indices)
    return WireMessage(
        tuple(int(p) for p in dst),
        str(dst.dtype),
        info.dst_aux_index,
        tuple(tuple(int(v) for v in s) for s in getattr(info, "dst_state_indices", ())),
        getattr(info, "decode_prefix_len", 0),
        bool(getattr(info, "is_dummy", False)),  # no dummy ranks before 0.4.6.post5
    )
