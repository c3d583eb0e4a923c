"""Port of the PD metadata wire (sglang 0.5.23, Mooncake): decode builds the frames
(``MooncakeKVManager.build_receiver_metadata_message``), prefill parses them (``TransferInfo.from_zmq``).

The page list travels as raw bytes (``tobytes``) and is read back with ``np.frombuffer(..., np.int32)``: an
int64 list would come back twice as long with zeros between the pages, which is why decode casts to int32.
State lists are packed as little-endian int32 lists behind a header of their count and lengths
(``pack_int_lists``).
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from pdverify.model.exchange import WireMessage
from pdverify.production.transfer import from_wire, to_wire


def _pack_buffers(buffers: list[bytes]) -> bytes:
    """A count, the lengths, then the buffers (``pack_list_of_buffers``); nothing for no buffers."""
    if not buffers:
        return b""
    return struct.pack(f"<{len(buffers) + 1}I", len(buffers), *(len(b) for b in buffers)) + b"".join(buffers)


def _unpack_buffers(data: bytes) -> list[bytes]:
    if not data:
        return []
    (count,) = struct.unpack_from("<I", data, 0)
    sizes = struct.unpack_from(f"<{count}I", data, 4)
    out, pos = [], 4 * (count + 1)
    for size in sizes:
        out.append(data[pos : pos + size])
        pos += size
    return out


def build_frames(
    pages: npt.NDArray[np.integer], aux_index: int, state: list[list[int]], decode_prefix_len: int, room: int = 7
) -> list[bytes]:
    """Decode's metadata frames for one destination (not a dummy rank)."""
    return [
        str(room).encode("ascii"),
        b"10.0.0.2",
        b"9000",
        b"session",
        to_wire(pages),
        str(aux_index).encode("ascii"),
        _pack_buffers([struct.pack(f"<{len(s)}i", *s) for s in state]) if state else b"",
        b"1",
        str(decode_prefix_len or 0).encode("ascii"),
        b"",
    ]


def parse_frames(msg: list[bytes]) -> WireMessage:
    """Prefill's reading of the frames."""
    if msg[4] == b"" and msg[5] == b"":
        return WireMessage((), "int32", None, (), None, True)
    pages = from_wire(msg[4])
    state = tuple(tuple(struct.unpack(f"<{len(b) // 4}i", b)) for b in _unpack_buffers(msg[6]))
    prefix = int(msg[8].decode("ascii")) if len(msg) > 8 and msg[8] != b"" else None
    return WireMessage(tuple(int(p) for p in pages), str(pages.dtype), int(msg[5]), state, prefix, False)


def wire_roundtrip(
    pages: npt.NDArray[np.integer], aux_index: int, state: list[list[int]], decode_prefix_len: int
) -> WireMessage:
    """Decode's page list, aux index, state lists and prefix through the frames and back."""
    return parse_frames(build_frames(pages, aux_index, state, decode_prefix_len))
