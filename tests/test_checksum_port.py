"""The KV checksum port (``pdverify.production.checksum``) next to its oracle: every registered state type digested
by its own payload's items, and a side that refuses registered state without indices reported, not raised."""

from __future__ import annotations

from typing import Any
from unittest import mock

import torch

from pdverify.model.checksum import ChecksumCase
from pdverify.oracle import checksum as oracle
from pdverify.production import checksum as port


def _case(**kw: Any) -> ChecksumCase:
    base: dict[str, Any] = {
        "page_size": 128, "prompt": 300, "prefill_pages": (5, 2, 7), "decode_pages": (3, 6, 1),
        "chunk_ends": (200, 300), "decode_prefix": 128, "kv_cache_dtype": "mxfp8", "sliding_window": 100,
        "prefill_swa_pages": (4, 6, 2), "decode_swa_pages": (2, 8, 5),
    }  # fmt: skip
    return ChecksumCase(**{**base, **kw})


def test_every_state_type_is_digested_by_its_own_payload() -> None:
    case = _case()
    trace = port.kv_checksum(case, "cpu")
    assert trace.accepted and not trace.raised, trace
    assert [(k, list(v)) for k, v in trace.prefill_state_digest] == oracle.prefill_state_digest(case)
    assert [(k, list(v)) for k, v in trace.decode_state_digest] == oracle.decode_state_digest(case)
    # the window [200, 300) page-aligned down to 128: logical pages 1-2; the full-attention scales over [D, n)
    assert dict(trace.prefill_state_digest) == {"swa": (6, 2), "block_scale": (2, 7), "block_scale_swa": (6, 2)}
    assert dict(trace.sent_state)["block_scale"] == (5, 2, 7)  # _full_kv_pages_payload: the pages of [0, n)


def test_a_side_without_state_indices_is_reported() -> None:
    fixed = port.state_indices
    calls: list[int] = []

    def on_decode_only(case: ChecksumCase, kv: torch.Tensor, window: torch.Tensor) -> Any:
        calls.append(1)
        return fixed(case, kv, window) if len(calls) == 1 else None

    with mock.patch.object(port, "state_indices", on_decode_only):
        trace = port.kv_checksum(_case(), "cpu")
    assert trace.raised.startswith("decode: AssertionError: state buffers are registered") and not trace.accepted
    assert trace.prefill_state_digest and not trace.decode_state_digest
    with mock.patch.object(port, "state_indices", lambda case, kv, window: None):
        trace = port.kv_checksum(_case(), "cpu")
    assert trace.raised.startswith("prefill: AssertionError") and trace.prefill_digest == ()
