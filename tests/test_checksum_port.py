"""The KV checksum port (``pdverify.production.checksum``) next to its oracle: every registered state type digested
by its own payload's items, and a side that refuses registered state without indices reported, not raised."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
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

    def on_decode_only(
        case: ChecksumCase, kv: torch.Tensor, window: torch.Tensor, slot: torch.Tensor, row: torch.Tensor
    ) -> Any:
        calls.append(1)
        return fixed(case, kv, window, slot, row) if len(calls) == 1 else None

    with mock.patch.object(port, "state_indices", on_decode_only):
        trace = port.kv_checksum(_case(), "cpu")
    assert trace.raised.startswith("decode: AssertionError: state buffers are registered") and not trace.accepted
    assert trace.prefill_state_digest and not trace.decode_state_digest
    with mock.patch.object(port, "state_indices", lambda case, kv, window, slot, row: None):
        trace = port.kv_checksum(_case(), "cpu")
    assert trace.raised.startswith("prefill: AssertionError") and trace.prefill_digest == ()


@pytest.mark.parametrize(
    ("kw", "state"),
    [
        ({"kv_pool": "dsa", "page_size": 64, "prompt": 150, "decode_prefix": 64}, {"dsa": (2, 7)}),
        ({"kv_pool": "mamba", "page_size": 64, "prompt": 150}, {"mamba": (4,)}),
        ({"kv_pool": "mamba_dsa", "page_size": 64, "prompt": 150}, {"mamba": (4,), "dsa": (5, 2, 7)}),
        (
            {"kv_pool": "mamba_dsa", "page_size": 256, "dsa_index_kpool": 4, "prompt": 600},
            {"mamba": (4,), "dsa": (5, 2, 7), "dsa_tail": ()},
        ),
        (
            {"kv_pool": "mamba_qsa", "page_size": 64, "prompt": 150, "decode_prefix": 64, "prefill_row": 9},
            {"mamba": (4,), "qsa_pending": (9,), "qsa_compressed": (2, 7)},
        ),
    ],
)
def test_a_dsa_or_hybrid_linear_pool_digests_each_state_by_its_payload(kw: dict[str, Any], state: Any) -> None:
    """The DSA index keys by the KV pages past D, the Mamba state by the side's slot, the compressed indexer's tail
    not at all (a descriptor of ring slots, never items); byte-exact transfers are accepted."""
    mamba = {"prefill_mamba_slot": 4, "decode_mamba_slot": 11} if kw["kv_pool"] != "dsa" else {}
    n = -(-kw["prompt"] // kw["page_size"])
    plain = {"kv_cache_dtype": "auto", "sliding_window": 0, "prefill_swa_pages": (), "decode_swa_pages": (),
             "decode_prefix": 0, "prefill_pages": (5, 2, 7)[:n], "decode_pages": (3, 6, 1)[:n],
             "chunk_ends": (kw["prompt"],)}  # fmt: skip
    case = _case(**{**plain, **kw, **mamba})
    trace = port.kv_checksum(case, "cpu")
    assert trace.accepted and not trace.raised, trace
    assert dict(trace.prefill_state_digest) == state
    assert [(k, list(v)) for k, v in trace.decode_state_digest] == oracle.decode_state_digest(case)
    if case.mamba:
        assert dict(trace.decode_state_digest)["mamba"] == (11,) and dict(trace.sent_state)["mamba"] == (4,)
    if case.kv_pool == "mamba_qsa":  # the ring by each side's row; the compressed keys sent for [0, n)
        assert dict(trace.decode_state_digest)["qsa_pending"] == (1,) and dict(trace.sent_state)["qsa_pending"] == (9,)
        assert dict(trace.sent_state)["qsa_compressed"] == (5, 2, 7)
